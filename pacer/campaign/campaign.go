// Package campaign is a consumer's live view of campaign control: the
// state of each campaign it handles records of (running, paused,
// cancelled), read from Redis when its first record comes and then every
// Refresh, and the counts of its finished records, added to the
// campaigns' counters every CountsEvery.
package campaign

import (
	"context"
	"crypto/rand"
	"log/slog"
	"sync"
	"time"

	"github.com/pacerhq/pacer/internal/logrepeat"
	"github.com/pacerhq/pacer/internal/tick"
	"github.com/pacerhq/pacer/pacer/control"
)

// Store holds campaign states and counters; *control.Store implements
// it.
type Store interface {
	States(ctx context.Context, channel string, campaigns []string) ([]control.State, error)
	// AddBatch adds a batch of counts under token, once per token (see
	// control.Store.AddBatch).
	AddBatch(ctx context.Context, channel, token string, counts map[string]*control.Counts) (refused []string, err error)
}

// Campaign control timing.
const (
	// Refresh is how often a replica re-reads the states of the
	// campaigns it saw lately (one pipelined Redis round trip for all).
	Refresh = 500 * time.Millisecond
	// forget is how long a campaign's state stays cached after its
	// last record.
	forget = 5 * time.Minute
	// PausedRecheck is how far ahead a paused record is parked: it comes
	// back (a Kafka write and read) and is looked at again after this long,
	// so a resume sends it within about this long.
	PausedRecheck = 5 * time.Second
	// CountsEvery is how often counted outcomes are added to the campaigns'
	// counters in Redis.
	CountsEvery = time.Second
)

// Live is this process's view of campaign states and its counts not yet
// added to Redis. Make it with [New]; [Live.Start] keeps it fresh.
type Live struct {
	store   Store
	channel string
	log     *slog.Logger
	base    context.Context // the process's: a first read outlives the worker that asked

	// statesLog keeps a Redis outage from logging "campaign states
	// unavailable" at every retry: the first, then one a minute, and a
	// line when the states can be read again.
	statesLog logrepeat.Gate

	mu     sync.Mutex
	states map[string]*state
	counts map[string]*control.Counts
	// unsure is the batch whose add failed (Redis may have added it): sent
	// again under its token before anything else, so it is added once.
	unsure *batch
}

// batch is a batch of counts and the token it was first sent under.
type batch struct {
	token  string
	counts map[string]*control.Counts
}

type state struct {
	state    control.State
	read     chan struct{} // closed once read from Redis
	lastSeen time.Time
}

// New returns the live view of channel's campaigns in store, logging to
// log. It reads nothing until [Live.State] asks for a campaign; call
// [Live.Start] before.
func New(store Store, channel string, log *slog.Logger) *Live {
	return &Live{store: store, channel: channel, log: log, base: context.Background(),
		states: map[string]*state{}, counts: map[string]*control.Counts{}}
}

// Start makes ctx the context of first reads (they outlive the record
// that asked) and refreshes the states of the campaigns seen in the last
// 5 minutes every Refresh and adds the counts every CountsEvery, in a
// goroutine, until ctx ends; then it adds the last counts. Call it once,
// before the first State.
func (c *Live) Start(ctx context.Context) {
	c.base = ctx
	go c.loop(ctx)
}

// State returns campaign's state as last read (at most Refresh
// ago); the first call for a campaign reads it. ok is false when ctx ended
// before the first read.
func (c *Live) State(ctx context.Context, campaign string) (control.State, bool) {
	cs := c.seen(campaign)
	select {
	case <-cs.read:
	case <-ctx.Done():
		return "", false
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	return cs.state, true
}

// Cached returns campaign's state as last read, without waiting (Running
// when it was never read).
func (c *Live) Cached(campaign string) control.State {
	c.mu.Lock()
	defer c.mu.Unlock()
	if cs := c.states[campaign]; cs != nil {
		return cs.state
	}
	return control.Running
}

// Watched returns campaign's state as last read without waiting, and keeps
// it read every Refresh (as [Live.State] does); known is false until its
// first read came back (which this call starts when needed).
func (c *Live) Watched(campaign string) (st control.State, known bool) {
	cs := c.seen(campaign)
	c.mu.Lock()
	defer c.mu.Unlock()
	select {
	case <-cs.read:
		known = true
	default:
	}
	return cs.state, known
}

// seen returns campaign's entry, marked seen now so that it is read every
// Refresh for the next 5 minutes; for a campaign not seen before (or
// forgotten) it makes one and starts its first read.
func (c *Live) seen(campaign string) *state {
	c.mu.Lock()
	cs := c.states[campaign]
	first := cs == nil
	if first {
		cs = &state{read: make(chan struct{})}
		c.states[campaign] = cs
	}
	cs.lastSeen = time.Now()
	c.mu.Unlock()
	if first {
		go c.refresh(c.base, []string{campaign})
	}
	return cs
}

// refresh reads the states of names; an error keeps the last ones (and
// retries within Refresh).
func (c *Live) refresh(ctx context.Context, names []string) {
	var states []control.State
	var err error
	for {
		states, err = c.store.States(ctx, c.channel, names)
		if err == nil || ctx.Err() != nil {
			break
		}
		if log, skipped := c.statesLog.Fail(); log {
			c.log.Warn("campaign states unavailable; keeping the last ones (logged at most once a minute while it lasts)",
				"err", err, "unlogged_failures", skipped)
		}
		if !tick.Sleep(ctx, Refresh) {
			return
		}
	}
	if err != nil {
		return
	}
	if ok, failures, lasted := c.statesLog.OK(); ok {
		c.log.Info("campaign states recovered", "failures", failures, "after", lasted.Round(time.Millisecond))
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	for i, n := range names {
		cs := c.states[n]
		if cs == nil {
			continue
		}
		if was := cs.state; was != states[i] {
			select {
			case <-cs.read:
				c.log.Info("campaign state changed", "campaign", n, "old", stateName(was), "new", stateName(states[i]))
			default:
			}
		}
		cs.state = states[i]
		select {
		case <-cs.read:
		default:
			close(cs.read)
		}
	}
}

func stateName(s control.State) string {
	if s == control.Running {
		return "running"
	}
	return string(s)
}

// Count adds one finished record of campaign: delivered, or dead-lettered
// with reason (label, the part before ":").
func (c *Live) Count(campaign string, delivered bool, reason string) {
	c.add(campaign, func(n *control.Counts) {
		if delivered {
			now := time.Now().UnixMilli()
			if n.First == 0 {
				n.First = now
			}
			n.Last = now
			n.Delivered++
			return
		}
		n.DeadLetters[reason]++
	})
}

// CountDuplicate adds one record of campaign skipped as published again
// (a record of a campaign published again after its id was delivered).
func (c *Live) CountDuplicate(campaign string) {
	c.add(campaign, func(n *control.Counts) { n.Duplicates++ })
}

// add applies inc to campaign's counts not yet written.
func (c *Live) add(campaign string, inc func(*control.Counts)) {
	if campaign == "" {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	n := c.counts[campaign]
	if n == nil {
		n = &control.Counts{DeadLetters: map[string]int64{}}
		c.counts[campaign] = n
	}
	inc(n)
}

// Flush adds the counts gathered so far to Redis, once: a batch whose add
// failed (Redis may have added it, its answer lost) is kept with its token
// and sent again under it, first, by the next flush; the counts gathered
// meanwhile wait until it went through. The counts of campaigns Redis
// refused (their key holds another type) are kept for the next flush,
// under a new token.
func (c *Live) Flush(ctx context.Context) {
	c.mu.Lock()
	b := c.unsure
	c.unsure = nil
	if b == nil && len(c.counts) > 0 {
		b = &batch{token: rand.Text(), counts: c.counts}
		c.counts = map[string]*control.Counts{}
	}
	c.mu.Unlock()
	if b == nil {
		return
	}
	refused, err := c.store.AddBatch(ctx, c.channel, b.token, b.counts)
	if err != nil {
		c.log.Warn("campaign counters not written; retrying", "err", err)
		c.mu.Lock()
		c.unsure = b
		c.mu.Unlock()
		return
	}
	if len(refused) > 0 {
		c.log.Warn("campaign counters refused: the campaigns' keys hold another type than a hash; retrying", "campaigns", refused)
		c.mu.Lock()
		for _, k := range refused {
			c.merge(k, b.counts[k])
		}
		c.mu.Unlock()
	}
}

// merge adds n to campaign k's counts not yet written. Callers hold c.mu.
func (c *Live) merge(k string, n *control.Counts) {
	if n == nil {
		return
	}
	m := c.counts[k]
	if m == nil {
		c.counts[k] = n
		return
	}
	m.Delivered += n.Delivered
	m.Duplicates += n.Duplicates
	m.First = min(m.First, n.First)
	if m.First == 0 {
		m.First = n.First
	}
	m.Last = max(m.Last, n.Last)
	for r, v := range n.DeadLetters {
		m.DeadLetters[r] += v
	}
}

// loop refreshes the states of the campaigns seen in the last forget
// every Refresh and adds the counts every CountsEvery, until ctx ends;
// then it adds the last counts.
func (c *Live) loop(ctx context.Context) {
	lastFlush := time.Now()
	tick.Every(ctx, Refresh, func(now time.Time) {
		var names []string
		c.mu.Lock()
		for n, cs := range c.states {
			if now.Sub(cs.lastSeen) > forget {
				delete(c.states, n)
				continue
			}
			names = append(names, n)
		}
		c.mu.Unlock()
		if len(names) > 0 {
			c.refresh(ctx, names)
		}
		if now.Sub(lastFlush) >= CountsEvery {
			lastFlush = now
			c.Flush(ctx)
		}
	})
	fctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
	c.Flush(fctx)
	cancel()
}
