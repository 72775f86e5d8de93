package ledger

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/pacerhq/pacer/bucket"
	"github.com/pacerhq/pacer/internal/wire"
	"github.com/pacerhq/pacer/lua"
	"github.com/redis/go-redis/v9"
)

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
	// TTL is how long an entry is seen at least (see [New]); 0 means
	// [DefaultTTL].
	TTL time.Duration
	// OnError, if set, is told of a failed flush of delivered marks or
	// releases (they are tried again at the next flush, after a back-off of
	// up to 1 s) and of marks dropped beyond 100,000 waiting. It is called
	// from the flushing goroutine.
	OnError func(error)
	// Count, if set, writes the counts queued with delivered marks
	// ([Batcher.DeliveredCounted]) or alone ([Batcher.AddCount]) in the
	// flush that writes those marks: see [CountWriter].
	Count CountWriter
}

// Count is one outcome counted with the delivered mark of its record
// ([Batcher.DeliveredCounted]), or alone ([Batcher.AddCount]): Name is
// what it counts in (a campaign), Field which counter (e.g. "delivered",
// "dlq:<reason>"), At the Unix ms of the outcome.
type Count struct {
	Name, Field string
	At          int64
}

// CountWriter adds to pipe, the pipeline of one flush, the writes of one
// batch of counts (in the order they were queued) under token, and returns
// a function that, once pipe ran, returns refused, the counts Redis
// answered it did not write (they go again with the next flush, in a new
// batch under a new token), and err, set when the batch's answer failed or
// was lost (Redis may have written it or not: the same batch goes again
// with the next flush, under the same token). The writer must write a
// token's batch at most once: a batch sent again under a token Redis has
// seen writes nothing and answers what its first write did (see
// control.Store.AddTo), so a flush that timed out after Redis applied it
// does not count twice. A token is 128 random bits, new for each batch.
//
// A flush writes at most one new batch (the counts queued since the last
// flush) plus the batches of earlier flushes sent again. Without Redis
// Cluster the flush runs in one MULTI/EXEC, so its marks and counts are
// written together or not at all; under Redis Cluster the counts' keys are
// in another slot than the marks' (see [Batcher.DeliveredCounted]). It is
// called from the flushing goroutine.
type CountWriter func(ctx context.Context, pipe redis.Pipeliner, token string, counts []Count) (result func() (refused []Count, err error))

// countBatch is a batch of counts and the token it was sent under.
type countBatch struct {
	token  string
	counts []Count
}

// Batcher is a [Ledger] whose operations from many goroutines go to Redis
// together: every FlushInterval at most, the claims, delivered marks and
// releases that wait are sent in one pipeline (one round trip per Redis
// node) of ledger.lua calls, one per channel (per pacing key under Redis
// Cluster, whose keys of one call must share a slot), at most 1,000
// operations each. Each call runs a handful of commands whatever its size
// (TIME, MGET of the cooldowns, an HMGET of each pacing key's
// suppressions its claims check, an HMGET per generation read, one HSET
// and one PEXPIREAT; see [Ledger]), so Redis commands per message fall as the
// batch grows, and round trips per message are about 1 / (messages per
// flush). Redis runs the operations of a flush in the order they were
// made, marks and releases before claims, so a claim always sees every
// mark made before it.
//
// Claim waits for its flush; [Batcher.ClaimAsync] starts a claim without
// waiting, so a sender can claim ahead of its send slot and not after it.
// Delivered and Release only queue their write (and return nil): a record
// is finished before its mark reaches Redis. What that means after a crash
// is in [BatchConfig.FlushInterval]; a consumer commits the record's offset
// only from [Batcher.AfterWritten], so that Kafka delivers it again after a
// crash that lost its mark. Close writes what waits.
// DeliveredCounted queues a count (a campaign's) with the mark, written
// in the same flush ([BatchConfig.Count]), so a crash leaves the counts as
// it leaves the marks. Another store's work rides in the same pipeline
// with [Batcher.Ride] (the messaging-limit guard's admissions).
//
// A Batcher is safe for concurrent use.
type Batcher struct {
	l        *Ledger
	interval time.Duration
	maxBatch int
	onError  func(error)
	count    CountWriter

	mu      sync.Mutex
	claims  []*PendingClaim
	marks   []mark
	counts  []Count      // to write in the flush that writes the marks queued with them
	again   []countBatch // batches whose answer was lost: sent again under their token
	riders  []Rider      // other stores' work for the next flush ([Batcher.Ride])
	waiters []func()     // AfterWritten's, in the order given
	closed  bool
	// flushing: a flush holds marks taken from marks and counts.
	flushing bool
	wake     chan struct{} // an operation waits
	full     chan struct{} // MaxBatch operations wait, or Flush
	due      time.Time     // under mu: the latest a flush may start (FlushBy), zero if none
	rearm    chan struct{} // due moved earlier
	stop     chan struct{}
	stopped  chan struct{}
}

// mark is a delivered mark (kind 'd'), a dead-lettered mark (kind 'x') or
// a release of an owner's claim (kind 'r').
type mark = op

// NewBatcher returns a Batcher over rdb that names its keys with keys (see
// [New]) and starts its flushing goroutine; Close stops it.
func NewBatcher(rdb redis.Cmdable, keys bucket.Keys, cfg BatchConfig) *Batcher {
	if cfg.FlushInterval <= 0 {
		cfg.FlushInterval = DefaultFlushInterval
	}
	if cfg.MaxBatch <= 0 {
		cfg.MaxBatch = DefaultMaxBatch
	}
	b := &Batcher{l: New(rdb, keys, cfg.TTL), interval: cfg.FlushInterval, maxBatch: cfg.MaxBatch, onError: cfg.OnError, count: cfg.Count,
		wake: make(chan struct{}, 1), full: make(chan struct{}, 1), rearm: make(chan struct{}, 1), stop: make(chan struct{}), stopped: make(chan struct{})}
	go b.run()
	return b
}

// TTL returns how long an entry is seen at least.
func (b *Batcher) TTL() time.Duration { return b.l.ttl }

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

// FlushBy has what waits sent by t at the latest (now if t is past): a
// claim whose send slot is closer than the interval waits only until its
// answer is needed, and other operations that come meanwhile go with it,
// rather than a flush of its own at once.
func (b *Batcher) FlushBy(t time.Time) {
	if !time.Now().Before(t) {
		b.Flush()
		return
	}
	b.mu.Lock()
	if b.due.IsZero() || t.Before(b.due) {
		b.due = t
		select {
		case b.rearm <- struct{}{}:
		default:
		}
	}
	b.mu.Unlock()
}

// PendingClaim is a claim made with [Batcher.ClaimAsync].
type PendingClaim struct {
	b                       *Batcher
	channel, key, id, owner string
	force                   bool
	// read makes it a read of the id's state (op 'q'), writing nothing:
	// see [Batcher.IsDelivered]; state is its answer.
	read  bool
	state string

	to Recipient // checked for suppression in the claim's call

	done   chan struct{}
	taken  bool // under b.mu: a flush took it (it may be written)
	res    ClaimResult
	cool   time.Duration
	reason string // res Suppressed: the suppression's reason
	err    error
}

// ClaimAsync queues a claim of id (see [Ledger.Claim]) for the next flush
// and returns at once.
func (b *Batcher) ClaimAsync(channel, key, id, owner string, force bool) *PendingClaim {
	return b.ClaimForAsync(channel, key, id, owner, force, Recipient{})
}

// ClaimForAsync is ClaimAsync with to's suppression checked in the same
// script call (no Redis command of its own): a suppressed recipient
// answers [Suppressed] and claims nothing; [PendingClaim.Suppression]
// gives the reason. With to.Pair, a new claim or a takeover takes a turn
// of the pair's limit in that call too, or answers [PairLimited] and the
// wait for the pair's next turn ([Pair]).
func (b *Batcher) ClaimForAsync(channel, key, id, owner string, force bool, to Recipient) *PendingClaim {
	pc := &PendingClaim{b: b, channel: channel, key: key, id: id, owner: owner, force: force, to: to, done: make(chan struct{})}
	b.mu.Lock()
	if b.closed {
		b.mu.Unlock()
		pc.res, pc.cool, pc.reason, pc.err = b.l.claim(context.Background(), channel, key, id, owner, force, to)
		close(pc.done)
		return pc
	}
	b.claims = append(b.claims, pc)
	b.signal()
	b.mu.Unlock()
	return pc
}

// Suppression is the reason of a claim answered [Suppressed] (the
// suppression entry's, e.g. "unregistered"); "" otherwise. Read it once
// Done is closed.
func (pc *PendingClaim) Suppression() string { return pc.reason }

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

// IsDelivered reports whether id was recorded delivered, as
// [Ledger.IsDelivered] does, read in a flush after every mark queued
// before it: a delivered mark this process made and has not written yet
// counts (a parked copy of a record just delivered, handled right after
// it, is found). Its flush starts no later than by (at once when by is
// not after now, as [Batcher.FlushBy] has it), or at the end of the flush
// interval for a zero by: a caller whose work waits for the answer gives
// the time it needs it. Errors wrap the Redis error; after Close it reads
// at once.
func (b *Batcher) IsDelivered(ctx context.Context, channel, key, id string, by time.Time) (bool, error) {
	pc := &PendingClaim{b: b, channel: channel, key: key, id: id, read: true, done: make(chan struct{})}
	b.mu.Lock()
	if b.closed {
		b.mu.Unlock()
		return b.l.IsDelivered(ctx, channel, key, id)
	}
	b.claims = append(b.claims, pc)
	b.signal()
	b.mu.Unlock()
	if !by.IsZero() {
		b.FlushBy(by)
	}
	select {
	case <-pc.done:
	case <-ctx.Done():
		if pc.Cancel() {
			return false, ctx.Err()
		}
		<-pc.done
	}
	if pc.err != nil {
		return false, fmt.Errorf("ledger: read %q: %w", name(channel, key, id), pc.err)
	}
	return pc.state == "delivered", nil
}

// Claim claims id as [Ledger.Claim] does, in the next flush, and waits for
// the answer (see [PendingClaim.Wait] for ctx).
func (b *Batcher) Claim(ctx context.Context, channel, key, id, owner string, force bool) (ClaimResult, time.Duration, error) {
	return b.ClaimAsync(channel, key, id, owner, force).Wait(ctx)
}

// Delivered queues the mark of id as delivered (see [Ledger.Delivered]) for
// the next flush and returns nil. After Close it writes at once.
func (b *Batcher) Delivered(ctx context.Context, channel, key, id, providerID string) error {
	return b.queue(ctx, mark{kind: 'd', channel: channel, key: key, id: id, arg: providerID}, nil,
		func() error { return b.l.Delivered(ctx, channel, key, id, providerID) })
}

// Counting reports whether the Batcher writes counts ([BatchConfig.Count]);
// without, DeliveredCounted is Delivered and AddCount does nothing.
func (b *Batcher) Counting() bool { return b.count != nil }

// DeliveredCounted queues the mark of id as delivered, as Delivered does
// (its provider id kept with c's campaign, [Ledger.DeliveredIn]), and c
// with it: c is written in the flush that writes the mark, and
// tried again with it when that flush fails, so a count never reaches
// Redis long before or after its mark. Without Redis Cluster they go in one
// MULTI/EXEC: a crash (of the process or of its connection) leaves both or
// neither. Under Redis Cluster the mark (the pacing key's slot) and c (the
// count's keys, elsewhere) go in the same pipeline to two nodes: a crash
// while that one round trip is under way may leave one without the other.
// After Close it writes both at once.
func (b *Batcher) DeliveredCounted(ctx context.Context, channel, key, id, providerID string, c Count) error {
	cs := []Count{c}
	if b.count == nil {
		cs = nil
	}
	return b.queue(ctx, mark{kind: 'd', channel: channel, key: key, id: id, arg: providerID, campaign: c.Name}, cs,
		func() error {
			if err := b.l.DeliveredIn(ctx, channel, key, id, providerID, c.Name); err != nil {
				return err
			}
			return b.writeCounts(ctx, cs)
		})
}

// AddCount queues c, an outcome with no mark of its own (a record
// dead-lettered once its DLQ copy was acknowledged), for the next flush.
// After Close it writes at once; a failure is reported to OnError.
func (b *Batcher) AddCount(c Count) {
	if b.count == nil {
		return
	}
	b.mu.Lock()
	if b.closed {
		b.mu.Unlock()
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		if err := b.writeCounts(ctx, []Count{c}); err != nil {
			b.report(err)
		}
		return
	}
	b.counts = append(b.counts, c)
	b.signal()
	b.mu.Unlock()
}

// writeCounts writes cs in a pipeline of their own (after Close).
func (b *Batcher) writeCounts(ctx context.Context, cs []Count) error {
	if len(cs) == 0 || b.count == nil {
		return nil
	}
	pipe := b.l.rdb.Pipeline()
	result := b.count(ctx, pipe, rand.Text(), cs)
	_, _ = pipe.Exec(ctx)
	refused, err := result()
	if err != nil {
		return fmt.Errorf("ledger: %d counts not written: %w", len(cs), err)
	}
	if len(refused) > 0 {
		return fmt.Errorf("ledger: %d of %d counts refused by Redis", len(refused), len(cs))
	}
	return nil
}

// countsWaiting is how many counts wait for a flush, new or sent again.
// Callers hold b.mu.
func (b *Batcher) countsWaiting() int {
	n := len(b.counts)
	for _, c := range b.again {
		n += len(c.counts)
	}
	return n
}

// Release queues the release of owner's claim on id (see [Ledger.Release])
// for the next flush and returns nil. After Close it writes at once.
func (b *Batcher) Release(ctx context.Context, channel, key, id, owner string) error {
	return b.queue(ctx, mark{kind: 'r', channel: channel, key: key, id: id, arg: owner}, nil,
		func() error { return b.l.Release(ctx, channel, key, id, owner) })
}

// DeadLettered queues the mark of id as dead-lettered (see
// [Ledger.DeadLettered]) for the next flush, with the delivered marks, and
// returns nil. After Close it writes at once.
func (b *Batcher) DeadLettered(ctx context.Context, channel, key, id, reason string) error {
	return b.queue(ctx, mark{kind: 'x', channel: channel, key: key, id: id, arg: reason}, nil,
		func() error { return b.l.DeadLettered(ctx, channel, key, id, reason) })
}

// Lookup reads the state of each id of refs as [Ledger.Lookup] does, in a
// pipeline of its own (not in a flush): marks still waiting for their
// flush are not seen (their ids read as claimed or none).
func (b *Batcher) Lookup(ctx context.Context, refs []Ref) ([]State, error) {
	return b.l.Lookup(ctx, refs)
}

// queue queues m and the counts cs that go with it, under one lock: a
// flush takes both or neither.
func (b *Batcher) queue(_ context.Context, m mark, cs []Count, direct func() error) error {
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
	b.counts = append(b.counts, cs...)
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
	if len(b.claims)+len(b.marks)+len(b.riders)+b.countsWaiting() >= b.maxBatch {
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
		left := len(b.marks) + len(b.claims) + len(b.riders) + b.countsWaiting()
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
		// The flush starts an interval (or the back-off) after the first
		// operation, or at the earliest FlushBy, or at once on Flush.
		end := time.Now().Add(max(b.interval, backoff))
		t := time.NewTimer(time.Until(b.deadline(end, backoff)))
	wait:
		for {
			select {
			case <-t.C:
				break wait
			case <-b.full:
				if backoff == 0 {
					break wait
				}
			case <-b.rearm:
				t.Reset(time.Until(b.deadline(end, backoff)))
			case <-b.stop:
				t.Stop()
				return
			}
		}
		t.Stop()
		b.mu.Lock()
		b.due = time.Time{}
		b.mu.Unlock()
		ctx, cancel := context.WithTimeout(context.Background(), flushTimeout)
		ok := b.flush(ctx)
		cancel()
		if ok {
			backoff = 0
		} else {
			backoff = min(max(2*backoff, 50*time.Millisecond), time.Second)
		}
		b.mu.Lock()
		if len(b.claims)+len(b.marks)+len(b.riders)+b.countsWaiting() > 0 {
			b.signal()
		}
		b.mu.Unlock()
	}
}

// deadline returns when the flush of the operations waiting since end -
// interval starts: end, or the earliest FlushBy if sooner (not while
// backing off from a failed flush).
func (b *Batcher) deadline(end time.Time, backoff time.Duration) time.Time {
	b.mu.Lock()
	defer b.mu.Unlock()
	if backoff == 0 && !b.due.IsZero() && b.due.Before(end) {
		return b.due
	}
	return end
}

// maxOps bounds the operations of one ledger.lua call, so one call does
// not hold Redis long.
const maxOps = 1000

// call is one ledger.lua call of a flush: marks (and releases) then claims
// of one group, in the order they were made.
type call struct {
	marks  []mark
	claims []*PendingClaim
	cmd    redis.Cmder
}

func (c *call) ops() []op {
	ops := append([]op(nil), c.marks...)
	for _, pc := range c.claims {
		o := op{kind: 'c', channel: pc.channel, key: pc.key, id: pc.id, arg: pc.owner, to: pc.to}
		if pc.force {
			o.kind = 'f'
		}
		if pc.read {
			o.kind, o.arg = 'q', ""
		}
		ops = append(ops, o)
	}
	return ops
}

// flush sends what waits in one pipeline and reports whether every mark
// was written. Marks that failed wait for the next flush, and the claims of
// their group behind them answer an error: a claim must never pass a mark
// made before it.
func (b *Batcher) flush(ctx context.Context) bool {
	b.mu.Lock()
	marks, claims, batches, waiters, riders := b.marks, b.claims, b.again, b.waiters, b.riders
	if len(b.counts) > 0 {
		batches = append(batches, countBatch{token: rand.Text(), counts: b.counts})
	}
	b.marks, b.claims, b.counts, b.again, b.waiters, b.riders = nil, nil, nil, nil, nil, nil
	for _, c := range claims {
		c.taken = true
	}
	b.flushing = true
	b.mu.Unlock()
	if len(marks)+len(claims)+len(batches)+len(riders) == 0 {
		b.written(waiters)
		return true
	}
	// Each group's calls, in order: its marks first, then its claims.
	var order []string
	byGroup := map[string][]*call{}
	last := func(g string) *call {
		cs := byGroup[g]
		if len(cs) == 0 || len(cs[len(cs)-1].marks)+len(cs[len(cs)-1].claims) >= maxOps {
			if len(cs) == 0 {
				order = append(order, g)
			}
			cs = append(cs, &call{})
			byGroup[g] = cs
		}
		return cs[len(cs)-1]
	}
	for _, m := range marks {
		c := last(b.l.group(m.channel, m.key))
		c.marks = append(c.marks, m)
	}
	for _, pc := range claims {
		c := last(b.l.group(pc.channel, pc.key))
		c.claims = append(c.claims, pc)
	}
	var calls []*call
	for _, g := range order {
		calls = append(calls, byGroup[g]...)
	}

	now := time.Now()
	pipe := b.l.rdb.Pipeline()
	if len(batches) > 0 && !b.l.cluster {
		// The marks and the counts queued with them: both or neither.
		pipe = b.l.rdb.TxPipeline()
	}
	for _, c := range calls {
		keys, argv := b.l.args(c.ops(), now)
		c.cmd = pipe.EvalSha(ctx, ledgerScript.Hash(), keys, argv...)
	}
	results := make([]func() ([]Count, error), len(batches))
	for i, cb := range batches {
		results[i] = b.count(ctx, pipe, cb.token, cb.counts)
	}
	answerRiders := ride(ctx, pipe, riders)
	_, _ = pipe.Exec(ctx) // each command's error is read below
	answerRiders()
	// Counts not written go again with the next flush, with the marks that
	// failed in this one (a NOSCRIPT below fails no count: the counts were
	// written, and the marks go again at once): a batch whose answer was
	// lost under its token, counts refused in a new batch.
	var again []countBatch
	var refused []Count
	var countErr error
	ncounts, nfailed := 0, 0
	for i, cb := range batches {
		ncounts += len(cb.counts)
		r, err := results[i]()
		if err != nil {
			again = append(again, cb)
			nfailed += len(cb.counts)
			countErr = cmp(countErr, err)
			continue
		}
		refused = append(refused, r...)
		nfailed += len(r)
	}

	// The script missing from the server's cache (a restart, SCRIPT
	// FLUSH): the calls that found none go again, with its text, in one
	// more pipeline.
	wire.EvalAgain(calls, func(c *call) error { return c.cmd.Err() }, func(again []*call) {
		pipe := b.l.rdb.Pipeline()
		for _, c := range again {
			keys, argv := b.l.args(c.ops(), now)
			c.cmd = pipe.Eval(ctx, lua.Ledger, keys, argv...)
		}
		_, _ = pipe.Exec(ctx)
	})

	var failed []mark
	var firstErr error
	failedGroup := map[string]bool{}
	for _, g := range order {
		for _, c := range byGroup[g] {
			v, err := c.cmd.(*redis.Cmd).Result()
			replies, _ := v.([]any)
			if err == nil && len(replies) != len(c.marks)+len(c.claims) {
				err = fmt.Errorf("%d replies for %d operations", len(replies), len(c.marks)+len(c.claims))
			}
			if err != nil || failedGroup[g] {
				if err == nil {
					err = errors.New("marks before it in the flush failed")
				}
				failedGroup[g] = true
				failed = append(failed, c.marks...)
				firstErr = cmp(firstErr, err)
				for _, pc := range c.claims {
					pc.res, pc.err = ClaimUnknown, fmt.Errorf("ledger: claim %q: %w", name(pc.channel, pc.key, pc.id), err)
					close(pc.done)
				}
				continue
			}
			for j, pc := range c.claims {
				s, _ := replies[len(c.marks)+j].(string)
				if pc.read {
					pc.state = s
				} else {
					pc.res, pc.cool, pc.reason, pc.err = parseClaim(name(pc.channel, pc.key, pc.id), s)
				}
				close(pc.done)
			}
		}
	}
	if nfailed > 0 {
		b.report(fmt.Errorf("ledger: %d of %d counts not written, tried again: %w", nfailed, ncounts, cmp(countErr, errors.New("refused by Redis"))))
	}
	if len(failed) > 0 {
		b.report(fmt.Errorf("ledger: %d of %d delivered marks or releases not written, tried again: %w", len(failed), len(marks), firstErr))
	}
	if len(failed)+nfailed > 0 {
		b.mu.Lock()
		b.marks = append(failed, b.marks...)
		b.again = again
		b.counts = append(refused, b.counts...)
		b.waiters = append(waiters, b.waiters...) // wait for the next flush
		b.flushing = false
		b.mu.Unlock()
		return false
	}
	b.written(waiters)
	return true
}

// AfterWritten calls fn once every mark and count queued before it is in
// Redis: at once when none waits, else from the flushing goroutine after
// the flush that writes the last of them (a failed flush's waiters wait
// for the next, with its marks), in the order AfterWritten was called. A
// mark dropped beyond 100,000 waiting (reported to OnError) counts as
// written. If Close ends before the marks are written, fn is never called.
//
// A consumer marks a Kafka offset for commit in fn: the offset is then
// committed only once the delivered marks of its records are in Redis, so
// a crash never leaves a record committed (never read again) without its
// mark.
func (b *Batcher) AfterWritten(fn func()) {
	b.mu.Lock()
	if len(b.marks)+b.countsWaiting() == 0 && !b.flushing {
		b.mu.Unlock()
		fn()
		return
	}
	b.waiters = append(b.waiters, fn)
	b.mu.Unlock()
}

// Written waits until every mark and count queued before it is in Redis
// (see [Batcher.AfterWritten]), flushing now, or until ctx ends (its
// error).
func (b *Batcher) Written(ctx context.Context) error {
	done := make(chan struct{})
	b.AfterWritten(func() { close(done) })
	b.Flush()
	select {
	case <-done:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// written calls waiters, whose marks a flush wrote, and those given while
// it ran if nothing is left to write. It ends the flush (b.flushing).
func (b *Batcher) written(waiters []func()) {
	b.mu.Lock()
	b.flushing = false
	if len(b.marks)+b.countsWaiting() == 0 {
		waiters = append(waiters, b.waiters...)
		b.waiters = nil
	}
	b.mu.Unlock()
	for _, fn := range waiters {
		fn()
	}
}

func cmp(first, err error) error {
	if first != nil {
		return first
	}
	return err
}
