package consumer_test

import (
	"context"
	"errors"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/pacerhq/pacer/bucket"
	"github.com/pacerhq/pacer/channels"
	"github.com/pacerhq/pacer/pacer/ledger"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"
)

// holdMarks is a go-redis hook that, while hold is set, fails every
// pipeline whose ledger.lua calls carry delivered marks and no claim: the
// marks wait in the Batcher, as they do between a send and the next flush,
// and claims (so sends) go on.
type holdMarks struct {
	hold    atomic.Bool
	refused atomic.Int64
}

func (h *holdMarks) DialHook(next redis.DialHook) redis.DialHook          { return next }
func (h *holdMarks) ProcessHook(next redis.ProcessHook) redis.ProcessHook { return next }
func (h *holdMarks) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		if h.hold.Load() {
			marks, claims := 0, 0
			for _, c := range cmds {
				if c.Name() == "evalsha" {
					marks += ledgerOps(c.Args(), "d")
					claims += ledgerOps(c.Args(), "cf")
				}
			}
			if marks > 0 && claims == 0 {
				h.refused.Add(1)
				err := errors.New("held by the test")
				for _, c := range cmds {
					c.SetErr(err)
				}
				return err
			}
		}
		return next(ctx, cmds)
	}
}

// idClaims is a go-redis hook on a ledger.Batcher's client that counts the
// claim operations of one envelope id in its ledger.lua calls, alone or in
// pipelines.
type idClaims struct {
	id string
	n  atomic.Int64
}

func (c *idClaims) count(cmd redis.Cmder) {
	if n := cmd.Name(); n == "evalsha" || n == "eval" {
		c.n.Add(int64(idLedgerOps(cmd.Args(), "cf", c.id)))
	}
}

func (c *idClaims) DialHook(next redis.DialHook) redis.DialHook { return next }
func (c *idClaims) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		c.count(cmd)
		return next(ctx, cmd)
	}
}
func (c *idClaims) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		for _, cmd := range cmds {
			c.count(cmd)
		}
		return next(ctx, cmds)
	}
}

// sendTogether holds the sends of ids until every one of them has come
// (or 20 s passed: late is then set). A send follows its claim's answer
// and comes before its mark, so once all have come every claim of ids is
// in Redis and no mark of theirs is queued yet: none can ride to Redis in
// the pipeline of a claim of another of ids, which holdMarks lets through
// (the key's records are in flight together, and their claims may come
// in separate flushes).
type sendTogether struct {
	channels.Sender
	mu   sync.Mutex
	ids  map[string]bool // the ids still to come
	all  chan struct{}   // closed once ids is empty
	late atomic.Bool
}

func newSendTogether(s channels.Sender, ids ...string) *sendTogether {
	st := &sendTogether{Sender: s, ids: map[string]bool{}, all: make(chan struct{})}
	for _, id := range ids {
		st.ids[id] = true
	}
	return st
}

func (s *sendTogether) Send(ctx context.Context, m channels.Message) (channels.Result, error) {
	s.mu.Lock()
	_, held := s.ids[m.ID]
	if held {
		delete(s.ids, m.ID)
		if len(s.ids) == 0 {
			close(s.all)
		}
	}
	s.mu.Unlock()
	if held {
		select {
		case <-s.all:
		case <-time.After(20 * time.Second):
			s.late.Store(true)
		}
	}
	return s.Sender.Send(ctx, m)
}

// TestCommitWaitsForMarks: an offset is committed only once the delivered
// marks of its records are in Redis. Three records are delivered and
// marked; the marks of the next three are held back: the pacer's shutdown
// commit covers the first three and none of the others (committing past
// one, a crash would leave the record never read again and without its
// mark: its campaign would never reach remaining 0). Once the marks are
// written, the next run reads the rest again, sends nothing twice and
// commits to the end.
func TestCommitWaitsForMarks(t *testing.T) {
	h := newHarness(t, nil)
	h.batched = 5 * time.Millisecond
	hold := &holdMarks{}
	h.batchHook = hold
	h.cfg.Drain = 10 * time.Second
	ids := []string{"a", "b", "c", "d", "e", "f"}
	refs := make([]ledger.Ref, len(ids))
	for i, id := range ids {
		refs[i] = ledger.Ref{Channel: "test", Key: "k1", ID: id}
	}
	plain := h.redis()
	look := ledger.New(plain, bucket.New(plain, bucket.Config{}).Keys(), 0)
	lookup := func() []ledger.State {
		states, err := look.Lookup(context.Background(), refs)
		if err != nil {
			t.Errorf("lookup: %v", err)
		}
		return states
	}

	var committed int64
	var states []ledger.State
	var stopping time.Time
	var shutdown time.Duration
	h.afterRun = func() {
		shutdown = time.Since(stopping)
		committed, states = committedOffset(t, h), lookup()
		hold.hold.Store(false) // Close writes the marks
	}
	together := newSendTogether(h.sender, "d", "e", "f")
	_, stop := h.start(h.cfg, together, h.reg)
	h.produce(env("a"), env("b"), env("c"))
	if !waitFor(20*time.Second, func() bool {
		s := lookup()
		return s[0] == ledger.StateDelivered && s[1] == ledger.StateDelivered && s[2] == ledger.StateDelivered
	}) {
		t.Fatalf("the first three were not marked delivered within 20 s: %v", lookup())
	}
	hold.hold.Store(true)
	h.produce(env("d"), env("e"), env("f"))
	if !waitFor(20*time.Second, func() bool {
		for _, id := range ids {
			if h.sender.count(h.sender.success, id) != 1 {
				return false
			}
		}
		return hold.refused.Load() > 0
	}) {
		t.Fatal("the last three were not sent within 20 s")
	}
	stopping = time.Now()
	stop()
	// The marks that do not come hold the shutdown (its commit, and the
	// revoke as the client leaves the group) about a second, not Drain
	// each.
	if shutdown >= h.cfg.Drain {
		t.Errorf("shutdown took %v with the marks held, want well under Drain (%v)", shutdown, h.cfg.Drain)
	}
	if together.late.Load() {
		t.Error("the sends of d, e and f did not all come within 20 s: their marks may have gone with a claim")
	}
	t.Logf("committed %d, states %v", committed, states)
	want := []ledger.State{ledger.StateDelivered, ledger.StateDelivered, ledger.StateDelivered,
		ledger.StateClaimed, ledger.StateClaimed, ledger.StateClaimed}
	if !slices.Equal(states, want) {
		t.Fatalf("states at shutdown %v, want %v: the test shows nothing", states, want)
	}
	if committed != 3 {
		t.Errorf("committed up to offset %d at shutdown, want 3: the three delivered and marked, none whose mark is not written", committed)
	}

	// The marks are written: the next run reads the uncommitted records
	// again, finds them delivered and commits to the end.
	h.batchHook, h.afterRun, h.reg = nil, nil, prometheus.NewRegistry()
	h.run(func() bool { return committedOffset(t, h) == int64(len(ids)) })
	for _, id := range ids {
		if n := h.sender.count(h.sender.calls, id); n != 1 {
			t.Errorf("%s sent %d times, want once", id, n)
		}
	}
}
