package consumer

import (
	"context"
	"log/slog"
	"strings"
	"sync"
	"time"

	"github.com/pacerhq/pacer/internal/logrepeat"
	"github.com/pacerhq/pacer/internal/tick"
	"github.com/pacerhq/pacer/pacer/control"
	"github.com/pacerhq/pacer/pacer/ledger"
	"github.com/redis/go-redis/v9"
)

// CampaignStore holds campaign states and counters; *control.Store
// implements it.
type CampaignStore interface {
	States(ctx context.Context, channel string, campaigns []string) ([]control.State, error)
	Add(ctx context.Context, channel string, counts map[string]*control.Counts) error
}

// Counter names of a [ledger.Count] of a campaign ([CampaignCounts]).
const (
	countDelivered  = "delivered"
	countDLQ        = "dlq:" // + the reason's label
	countDuplicates = "duplicates"
)

// CampaignAdder adds campaign counts to a pipeline; *control.Store
// implements it.
type CampaignAdder interface {
	AddTo(ctx context.Context, pipe redis.Pipeliner, channel string, counts map[string]*control.Counts) func() map[string]*control.Counts
}

// CampaignCounts returns the [ledger.CountWriter] that adds the counts of
// channel's campaigns ([ledger.Count] Name the campaign, Field "delivered",
// "dlq:<reason>" or "duplicates", At the Unix ms of a delivery) to their counters in
// store, in the pipeline of the ledger flush that writes the records'
// marks: give it as the Count of the Batcher given as [Deps].Ledger, with
// the same store as [Deps].Campaigns.
func CampaignCounts(store CampaignAdder, channel string) ledger.CountWriter {
	return func(ctx context.Context, pipe redis.Pipeliner, cs []ledger.Count) func() []ledger.Count {
		counts := map[string]*control.Counts{}
		for _, c := range cs {
			n := counts[c.Name]
			if n == nil {
				n = &control.Counts{DeadLetters: map[string]int64{}}
				counts[c.Name] = n
			}
			if reason, ok := strings.CutPrefix(c.Field, countDLQ); ok {
				n.DeadLetters[reason]++
				continue
			}
			if c.Field == countDuplicates {
				n.Duplicates++
				continue
			}
			n.Delivered++
			if n.First == 0 || c.At < n.First {
				n.First = c.At
			}
			n.Last = max(n.Last, c.At)
		}
		unwritten := store.AddTo(ctx, pipe, channel, counts)
		return func() []ledger.Count {
			left := unwritten()
			if len(left) == 0 {
				return nil
			}
			var out []ledger.Count
			for _, c := range cs {
				n := left[c.Name]
				if n == nil {
					continue
				}
				reason, dlq := strings.CutPrefix(c.Field, countDLQ)
				switch {
				case dlq:
					if n.DeadLetters[reason] > 0 {
						out = append(out, c)
					}
				case c.Field == countDuplicates:
					if n.Duplicates > 0 {
						out = append(out, c)
					}
				case n.Delivered > 0:
					out = append(out, c)
				}
			}
			return out
		}
	}
}

// Campaign control timing.
const (
	// campaignRefresh is how often a replica re-reads the states of the
	// campaigns it saw lately (one pipelined Redis round trip for all).
	campaignRefresh = 500 * time.Millisecond
	// campaignForget is how long a campaign's state stays cached after its
	// last record.
	campaignForget = 5 * time.Minute
	// pausedRecheck is how far ahead a paused record is parked: it comes
	// back (a Kafka write and read) and is looked at again after this long,
	// so a resume sends it within about this long.
	pausedRecheck = 5 * time.Second
	// countsEvery is how often counted outcomes are added to the campaigns'
	// counters in Redis.
	countsEvery = time.Second
)

// campaigns is this process's view of campaign states and its counts not
// yet added to Redis.
type campaigns struct {
	store   CampaignStore
	channel string
	log     *slog.Logger
	base    context.Context // the process's: a first read outlives the worker that asked

	// statesLog keeps a Redis outage from logging "campaign states
	// unavailable" at every retry: the first, then one a minute, and a
	// line when the states can be read again.
	statesLog logrepeat.Gate

	mu     sync.Mutex
	states map[string]*campaignState
	counts map[string]*control.Counts
}

type campaignState struct {
	state    control.State
	read     chan struct{} // closed once read from Redis
	lastSeen time.Time
}

// state returns campaign's state as last read (at most campaignRefresh
// ago); the first call for a campaign reads it. ok is false when ctx ended
// before the first read.
func (c *campaigns) state(ctx context.Context, campaign string) (control.State, bool) {
	c.mu.Lock()
	cs := c.states[campaign]
	first := cs == nil
	if first {
		cs = &campaignState{read: make(chan struct{})}
		c.states[campaign] = cs
	}
	cs.lastSeen = time.Now()
	c.mu.Unlock()
	if first {
		go c.refresh(c.base, []string{campaign})
	}
	select {
	case <-cs.read:
	case <-ctx.Done():
		return "", false
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	return cs.state, true
}

// cached returns campaign's state as last read, without waiting (Running
// when it was never read).
func (c *campaigns) cached(campaign string) control.State {
	c.mu.Lock()
	defer c.mu.Unlock()
	if cs := c.states[campaign]; cs != nil {
		return cs.state
	}
	return control.Running
}

// refresh reads the states of names; an error keeps the last ones (and
// retries within campaignRefresh).
func (c *campaigns) refresh(ctx context.Context, names []string) {
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
		if !tick.Sleep(ctx, campaignRefresh) {
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

// count adds one finished record of campaign: delivered, or dead-lettered
// with reason (label, the part before ":").
func (c *campaigns) count(campaign string, delivered bool, reason string) {
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

// countDuplicate adds one record of campaign skipped as published again
// (see [Pacer.republished]).
func (c *campaigns) countDuplicate(campaign string) {
	c.add(campaign, func(n *control.Counts) { n.Duplicates++ })
}

// add applies inc to campaign's counts not yet written.
func (c *campaigns) add(campaign string, inc func(*control.Counts)) {
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

// flush adds the counts gathered so far to Redis; on failure they are kept
// for the next flush.
func (c *campaigns) flush(ctx context.Context) {
	c.mu.Lock()
	counts := c.counts
	c.counts = map[string]*control.Counts{}
	c.mu.Unlock()
	if len(counts) == 0 {
		return
	}
	if err := c.store.Add(ctx, c.channel, counts); err != nil {
		c.log.Warn("campaign counters not written; retrying", "err", err)
		c.mu.Lock()
		for k, n := range counts {
			m := c.counts[k]
			if m == nil {
				c.counts[k] = n
				continue
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
		c.mu.Unlock()
	}
}

// loop refreshes the states of the campaigns seen in the last
// campaignForget every campaignRefresh and adds the counts every
// countsEvery, until ctx ends; then it adds the last counts.
func (c *campaigns) loop(ctx context.Context) {
	lastFlush := time.Now()
	tick.Every(ctx, campaignRefresh, func(now time.Time) {
		var names []string
		c.mu.Lock()
		for n, cs := range c.states {
			if now.Sub(cs.lastSeen) > campaignForget {
				delete(c.states, n)
				continue
			}
			names = append(names, n)
		}
		c.mu.Unlock()
		if len(names) > 0 {
			c.refresh(ctx, names)
		}
		if now.Sub(lastFlush) >= countsEvery {
			lastFlush = now
			c.flush(ctx)
		}
	})
	fctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
	c.flush(fctx)
	cancel()
}
