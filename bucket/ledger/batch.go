package ledger

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/pacerhq/pacer/bucket"
	"github.com/pacerhq/pacer/lua"
	"github.com/redis/go-redis/v9"
)

var claimManyScript = redis.NewScript(lua.ClaimMany)

// Defaults of [BatchConfig].
const (
	// DefaultFlushInterval is how long the first operation of a batch waits
	// for others: at most one Redis round trip per 20 ms (50 a second) for
	// the whole process, whatever its message rate, and Flush for what
	// cannot wait.
	DefaultFlushInterval = 20 * time.Millisecond
	// DefaultMaxBatch is how many operations start a flush at once.
	DefaultMaxBatch = 512
	// flushTimeout bounds one flush: a Redis that does not answer fails the
	// flush (the claims answer an error, the marks wait for the next one)
	// rather than holding every claim until it is back.
	flushTimeout = time.Second
	// maxMarks bounds the delivered marks and releases kept while Redis
	// does not answer; beyond it the oldest are dropped (and reported).
	maxMarks = 100_000
)

// BatchConfig configures a [Batcher].
type BatchConfig struct {
	// FlushInterval is how long an operation may wait for others before
	// they go to Redis together in one pipeline; 0 means
	// [DefaultFlushInterval]. It bounds what a crash loses: the delivered
	// marks of the last FlushInterval (their records, if Kafka delivers
	// them again, read as abandoned: unknown outcome, never sent twice).
	FlushInterval time.Duration
	// MaxBatch is how many waiting operations flush at once without
	// waiting for FlushInterval; 0 means [DefaultMaxBatch].
	MaxBatch int
	// OnError, if set, is told of a failed flush of delivered marks or
	// releases (they are tried again at the next flush, after a back-off of
	// up to 1 s) and of marks dropped beyond 100,000 waiting. It is called
	// from the flushing goroutine.
	OnError func(error)
}

// Batcher is a [Ledger] whose operations from many goroutines go to Redis
// together: every FlushInterval at most, the claims, delivered marks and
// releases that wait are sent in one pipeline (one round trip per Redis
// node), the claims of one pacing key as one claim_many.lua call. Redis
// runs the operations of a flush in the order they were made, marks and
// releases before claims, so a claim always sees every mark made before it.
//
// Claim waits for its flush; [Batcher.ClaimAsync] starts a claim without
// waiting, so a sender can claim ahead of its send slot and not after it.
// Delivered and Release only queue their write (and return nil): a record
// is finished before its mark reaches Redis. What that means after a crash
// is in [BatchConfig.FlushInterval]. Close writes what waits.
//
// A Batcher is safe for concurrent use.
type Batcher struct {
	l        *Ledger
	interval time.Duration
	maxBatch int
	onError  func(error)

	mu      sync.Mutex
	claims  []*PendingClaim
	marks   []mark
	closed  bool
	wake    chan struct{} // an operation waits
	full    chan struct{} // MaxBatch operations wait
	stop    chan struct{}
	stopped chan struct{}
}

// mark is a delivered mark (owner == "") or a release of owner's claim.
type mark struct {
	k, val, owner string
	ttl           time.Duration
}

// NewBatcher returns a Batcher over rdb that names its keys with keys (see
// [New]) and starts its flushing goroutine; Close stops it.
func NewBatcher(rdb redis.Cmdable, keys bucket.Keys, cfg BatchConfig) *Batcher {
	if cfg.FlushInterval <= 0 {
		cfg.FlushInterval = DefaultFlushInterval
	}
	if cfg.MaxBatch <= 0 {
		cfg.MaxBatch = DefaultMaxBatch
	}
	b := &Batcher{l: New(rdb, keys), interval: cfg.FlushInterval, maxBatch: cfg.MaxBatch, onError: cfg.OnError,
		wake: make(chan struct{}, 1), full: make(chan struct{}, 1), stop: make(chan struct{}), stopped: make(chan struct{})}
	go b.run()
	return b
}

// FlushInterval returns the longest an operation waits for its flush.
func (b *Batcher) FlushInterval() time.Duration { return b.interval }

// Flush has what waits sent now, without waiting for the interval to end
// (a claim whose send slot is closer than that).
func (b *Batcher) Flush() {
	select {
	case b.full <- struct{}{}:
	default:
	}
}

// PendingClaim is a claim made with [Batcher.ClaimAsync].
type PendingClaim struct {
	b                       *Batcher
	channel, key, id, owner string
	ttl                     time.Duration
	force                   bool

	done  chan struct{}
	taken bool // under b.mu: a flush took it (it may be written)
	res   ClaimResult
	cool  time.Duration
	err   error
}

// ClaimAsync queues a claim of id (see [Ledger.Claim]) for the next flush
// and returns at once.
func (b *Batcher) ClaimAsync(channel, key, id, owner string, ttl time.Duration, force bool) *PendingClaim {
	pc := &PendingClaim{b: b, channel: channel, key: key, id: id, owner: owner, ttl: ttl, force: force, done: make(chan struct{})}
	b.mu.Lock()
	if b.closed {
		b.mu.Unlock()
		pc.res, pc.cool, pc.err = b.l.Claim(context.Background(), channel, key, id, owner, ttl, force)
		close(pc.done)
		return pc
	}
	b.claims = append(b.claims, pc)
	b.signal()
	b.mu.Unlock()
	return pc
}

// Done is closed once the claim's answer is known.
func (pc *PendingClaim) Done() <-chan struct{} { return pc.done }

// Cancel takes the claim out of its batch if no flush took it yet, and
// reports whether it did: then nothing was or will be written for it, and
// Wait answers [ClaimUnknown] with context.Canceled. When it reports false
// the claim is (or is being) written: Wait for its answer.
func (pc *PendingClaim) Cancel() bool {
	b := pc.b
	b.mu.Lock()
	defer b.mu.Unlock()
	if pc.taken {
		return false
	}
	select {
	case <-pc.done:
		return false // answered without a flush (after Close)
	default:
	}
	for i, c := range b.claims {
		if c == pc {
			b.claims = append(b.claims[:i], b.claims[i+1:]...)
			break
		}
	}
	pc.taken = true
	pc.err = context.Canceled
	close(pc.done)
	return true
}

// Wait returns the claim's answer, as [Ledger.Claim] would. If ctx ends
// first and the claim was not yet taken by a flush, it is cancelled and
// Wait answers [ClaimUnknown] with ctx.Err(); a claim already on its way
// is waited for (one round trip).
func (pc *PendingClaim) Wait(ctx context.Context) (ClaimResult, time.Duration, error) {
	select {
	case <-pc.done:
	case <-ctx.Done():
		if pc.Cancel() {
			return ClaimUnknown, 0, ctx.Err()
		}
		<-pc.done
	}
	return pc.res, pc.cool, pc.err
}

// Claim claims id as [Ledger.Claim] does, in the next flush, and waits for
// the answer (see [PendingClaim.Wait] for ctx).
func (b *Batcher) Claim(ctx context.Context, channel, key, id, owner string, ttl time.Duration, force bool) (ClaimResult, time.Duration, error) {
	return b.ClaimAsync(channel, key, id, owner, ttl, force).Wait(ctx)
}

// Delivered queues the mark of id as delivered (see [Ledger.Delivered]) for
// the next flush and returns nil. After Close it writes at once.
func (b *Batcher) Delivered(ctx context.Context, channel, key, id, providerID string, ttl time.Duration) error {
	return b.queue(ctx, mark{k: b.l.keys.ID(channel, key, id), val: "d:" + providerID, ttl: max(ttl, time.Millisecond)},
		func() error { return b.l.Delivered(ctx, channel, key, id, providerID, ttl) })
}

// Release queues the release of owner's claim on id (see [Ledger.Release])
// for the next flush and returns nil. After Close it writes at once.
func (b *Batcher) Release(ctx context.Context, channel, key, id, owner string) error {
	return b.queue(ctx, mark{k: b.l.keys.ID(channel, key, id), owner: owner},
		func() error { return b.l.Release(ctx, channel, key, id, owner) })
}

func (b *Batcher) queue(_ context.Context, m mark, direct func() error) error {
	b.mu.Lock()
	if b.closed {
		b.mu.Unlock()
		return direct()
	}
	if len(b.marks) >= maxMarks {
		b.marks = b.marks[1:]
		b.report(fmt.Errorf("ledger: %d marks wait for Redis: the oldest dropped (its record reads as abandoned if delivered again)", maxMarks))
	}
	b.marks = append(b.marks, m)
	b.signal()
	b.mu.Unlock()
	return nil
}

// signal wakes the flusher. Callers hold b.mu.
func (b *Batcher) signal() {
	select {
	case b.wake <- struct{}{}:
	default:
	}
	if len(b.claims)+len(b.marks) >= b.maxBatch {
		select {
		case b.full <- struct{}{}:
		default:
		}
	}
}

func (b *Batcher) report(err error) {
	if b.onError != nil {
		b.onError(err)
	}
}

// Close writes the operations that wait, trying the marks again until they
// are written or ctx ends (then they are lost and Close returns the
// error), and stops the flusher. Later operations go to Redis one by one.
func (b *Batcher) Close(ctx context.Context) error {
	b.mu.Lock()
	if b.closed {
		b.mu.Unlock()
		return nil
	}
	b.closed = true
	b.mu.Unlock()
	close(b.stop)
	<-b.stopped
	for {
		ok := b.flush(ctx)
		b.mu.Lock()
		left := len(b.marks) + len(b.claims)
		b.mu.Unlock()
		if ok && left == 0 {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("ledger: %d operations not written at close: %w", left, ctx.Err())
		case <-time.After(100 * time.Millisecond):
		}
	}
}

func (b *Batcher) run() {
	defer close(b.stopped)
	backoff := time.Duration(0)
	for {
		select {
		case <-b.wake:
		case <-b.stop:
			return
		}
		t := time.NewTimer(max(b.interval, backoff))
		select {
		case <-t.C:
		case <-b.full:
			if backoff > 0 {
				<-t.C
			}
		case <-b.stop:
			t.Stop()
			return
		}
		t.Stop()
		ctx, cancel := context.WithTimeout(context.Background(), flushTimeout)
		ok := b.flush(ctx)
		cancel()
		if ok {
			backoff = 0
		} else {
			backoff = min(max(2*backoff, 50*time.Millisecond), time.Second)
		}
		b.mu.Lock()
		if len(b.claims)+len(b.marks) > 0 {
			b.signal()
		}
		b.mu.Unlock()
	}
}

// claimGroup is the claims that go in one claim_many call: of one pacing
// key under Redis Cluster (one slot), else of any.
type claimGroup struct {
	owner  string
	ttl    time.Duration
	force  bool
	claims []*PendingClaim
}

// flush sends what waits in one pipeline and reports whether every mark
// was written. Marks that failed wait for the next flush, and so do the
// claims behind them: a claim must never pass a mark made before it.
func (b *Batcher) flush(ctx context.Context) bool {
	b.mu.Lock()
	marks, claims := b.marks, b.claims
	b.marks, b.claims = nil, nil
	for _, c := range claims {
		c.taken = true
	}
	b.mu.Unlock()
	if len(marks)+len(claims) == 0 {
		return true
	}
	var groups []*claimGroup
	byKey := map[string]*claimGroup{}
	_, cluster := b.l.rdb.(*redis.ClusterClient)
	for _, c := range claims {
		gk := strings.Join([]string{c.owner, c.ttl.String(), fmt.Sprint(c.force)}, "\x00")
		if cluster {
			gk += "\x00" + c.channel + "\x00" + c.key
		}
		g := byKey[gk]
		if g == nil || len(g.claims) >= 1000 {
			g = &claimGroup{owner: c.owner, ttl: c.ttl, force: c.force}
			byKey[gk] = g
			groups = append(groups, g)
		}
		g.claims = append(g.claims, c)
	}

	pipe := b.l.rdb.Pipeline()
	markCmds := make([]redis.Cmder, len(marks))
	for i, m := range marks {
		if m.owner == "" {
			markCmds[i] = pipe.Set(ctx, m.k, m.val, m.ttl)
		} else {
			markCmds[i] = pipe.EvalSha(ctx, releaseScript.Hash(), []string{m.k}, m.owner)
		}
	}
	groupCmds := make([]redis.Cmder, len(groups))
	for i, g := range groups {
		keys, argv := b.groupArgs(g)
		groupCmds[i] = pipe.EvalSha(ctx, claimManyScript.Hash(), keys, argv...)
	}
	_, _ = pipe.Exec(ctx) // each command's error is read below

	// A script missing from the server's cache (a restart, SCRIPT FLUSH):
	// the commands that found none go again, with the scripts' text, in
	// one more pipeline.
	var again []int // markCmds index, or len(marks)+group index
	for i, c := range markCmds {
		if isNoScript(c.Err()) {
			again = append(again, i)
		}
	}
	for i, c := range groupCmds {
		if isNoScript(c.Err()) {
			again = append(again, len(marks)+i)
		}
	}
	if len(again) > 0 {
		pipe := b.l.rdb.Pipeline()
		for _, i := range again {
			if i < len(marks) {
				markCmds[i] = pipe.Eval(ctx, lua.Release, []string{marks[i].k}, marks[i].owner)
			} else {
				g := groups[i-len(marks)]
				keys, argv := b.groupArgs(g)
				groupCmds[i-len(marks)] = pipe.Eval(ctx, lua.ClaimMany, keys, argv...)
			}
		}
		_, _ = pipe.Exec(ctx)
	}

	var failed []mark
	var firstErr error
	for i, c := range markCmds {
		if err := c.Err(); err != nil && !errors.Is(err, redis.Nil) {
			failed = append(failed, marks[i])
			firstErr = cmp(firstErr, err)
		}
	}
	if len(failed) > 0 {
		b.report(fmt.Errorf("ledger: %d of %d delivered marks or releases not written, tried again: %w", len(failed), len(marks), firstErr))
		for _, g := range groups { // behind the marks: not answered, waited for
			for _, c := range g.claims {
				c.res, c.err = ClaimUnknown, fmt.Errorf("ledger: claim %q: marks before it failed: %w", c.id, firstErr)
				close(c.done)
			}
		}
		b.mu.Lock()
		b.marks = append(failed, b.marks...)
		b.mu.Unlock()
		return false
	}
	for i, g := range groups {
		v, err := groupCmds[i].(*redis.Cmd).Result()
		replies, _ := v.([]any)
		for j, c := range g.claims {
			switch {
			case err != nil:
				c.res, c.err = ClaimUnknown, fmt.Errorf("ledger: claim %q: %w", b.l.keys.ID(c.channel, c.key, c.id), err)
			case j >= len(replies):
				c.res, c.err = ClaimUnknown, fmt.Errorf("ledger: claim %q: %d replies for %d ids", c.id, len(replies), len(g.claims))
			default:
				s, _ := replies[j].(string)
				c.res, c.cool, c.err = parseClaim(b.l.keys.ID(c.channel, c.key, c.id), s)
			}
			close(c.done)
		}
	}
	return true
}

// groupArgs returns the KEYS and ARGV of g's claim_many call.
func (b *Batcher) groupArgs(g *claimGroup) ([]string, []any) {
	coolIdx := map[string]int{}
	var cools, ids []string
	argv := []any{g.owner, ms(g.ttl), force(g.force), 0}
	for _, c := range g.claims {
		ck := b.l.keys.Cooldown(c.channel, c.key)
		i, ok := coolIdx[ck]
		if !ok {
			cools = append(cools, ck)
			i = len(cools)
			coolIdx[ck] = i
		}
		ids = append(ids, b.l.keys.ID(c.channel, c.key, c.id))
		argv = append(argv, i)
	}
	argv[3] = len(cools)
	return append(cools, ids...), argv
}

func force(f bool) string {
	if f {
		return "1"
	}
	return "0"
}

func isNoScript(err error) bool {
	return err != nil && strings.HasPrefix(err.Error(), "NOSCRIPT")
}

func cmp(first, err error) error {
	if first != nil {
		return first
	}
	return err
}
