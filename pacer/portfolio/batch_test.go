package portfolio_test

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/pacerhq/pacer/bucket"
	"github.com/pacerhq/pacer/internal/redistest"
	"github.com/pacerhq/pacer/internal/testenv"
	"github.com/pacerhq/pacer/lua"
	"github.com/pacerhq/pacer/pacer/ledger"
	"github.com/pacerhq/pacer/pacer/portfolio"
	"github.com/pacerhq/pacer/pacer/suppress"
	"github.com/redis/go-redis/v9"
)

// msg is one business-initiated message of a test sequence.
type msg struct {
	portfolio, to string
	marketing     bool
}

// sequence: portfolio "a" at tier 4 fills up (new, seen, deferred
// recipients, a repeat that refreshes the oldest entry); "b", unlimited
// with marketing paused, interleaved: its marketing messages pause, its
// utility ones enter.
var sequence = []msg{
	{"a", "u1", false}, {"b", "v1", true}, {"a", "u2", true}, {"a", "u1", false},
	{"b", "v2", false}, {"a", "u3", false}, {"a", "u4", false}, {"a", "u5", false},
	{"b", "v2", true}, {"a", "u1", true}, {"a", "u6", true}, {"b", "v3", false},
	{"a", "u2", false}, {"a", "u5", false}, {"b", "v1", false},
}

// queueInOrder starts each of ms's admissions through bt in its own
// goroutine, in order (each waits in the batch before the next starts),
// flushes led once, and returns the answers.
func queueInOrder(t *testing.T, bt *portfolio.Batch, led *ledger.Batcher, channel string, ms []msg) []portfolio.Admission {
	t.Helper()
	out := make([]portfolio.Admission, len(ms))
	errs := make([]error, len(ms))
	var wg sync.WaitGroup
	for i, m := range ms {
		wg.Add(1)
		go func() {
			defer wg.Done()
			out[i], errs[i] = bt.Admit(context.Background(), channel, m.portfolio, suppress.Hash(m.to), m.marketing, time.Time{})
		}()
		deadline := time.Now().Add(10 * time.Second)
		for bt.Waiting() != i+1 {
			if time.Now().After(deadline) {
				t.Fatalf("admission %d not queued within 10 s (%d waiting)", i, bt.Waiting())
			}
			time.Sleep(time.Millisecond) // polls the queue; no answer is awaited by sleeping
		}
	}
	led.Flush()
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			t.Fatalf("admission %d (%+v): %v", i, ms[i], err)
		}
	}
	return out
}

// batchEqualsSequential admits sequence one Admit at a time into channel
// "seq" and through a Batch in one ledger flush into channel "bat" (same
// tiers, same pause) and compares each verdict.
func batchEqualsSequential(t *testing.T, rdb redis.Cmdable, prefix string, exact bool) {
	ctx := context.Background()
	keys := bucket.NewKeys(prefix)
	st := portfolio.NewStore(rdb, keys).WithWindow(time.Hour)
	for _, ch := range []string{"seq", "bat"} {
		if err := st.SetTier(ctx, ch, "a", 4); err != nil {
			t.Fatal(err)
		}
		if err := st.SetTier(ctx, ch, "b", portfolio.Unlimited); err != nil {
			t.Fatal(err)
		}
		if err := st.SetQuality(ctx, ch, "b", portfolio.Downgrade, time.Unix(1_800_000_000, 0), true); err != nil {
			t.Fatal(err)
		}
	}
	want := make([]portfolio.Admission, len(sequence))
	for i, m := range sequence {
		a, err := st.Admit(ctx, "seq", m.portfolio, suppress.Hash(m.to), m.marketing)
		if err != nil {
			t.Fatal(err)
		}
		want[i] = a
	}
	led := ledger.NewBatcher(rdb, keys, ledger.BatchConfig{FlushInterval: time.Hour})
	defer led.Close(ctx)
	got := queueInOrder(t, st.Batched(led), led, "bat", sequence)
	verdicts := map[portfolio.Verdict]int{}
	for i := range sequence {
		w, g := want[i], got[i]
		verdicts[g.Verdict]++
		if exact { // miniredis: one frozen clock, so scores and waits match too
			if g != w {
				t.Errorf("message %d %+v: batch %+v; sequential %+v", i, sequence[i], g, w)
			}
			continue
		}
		if g.Verdict != w.Verdict || g.Used != w.Used || g.Tier != w.Tier || g.Hash != w.Hash ||
			(g.Score == 0) != (w.Score == 0) || (g.Wait > 0) != (w.Wait > 0) || g.Wait > time.Hour+time.Millisecond {
			t.Errorf("message %d %+v: batch %+v; sequential %+v", i, sequence[i], g, w)
		}
	}
	if verdicts[portfolio.New] != 7 || verdicts[portfolio.Seen] != 3 || verdicts[portfolio.Deferred] != 3 || verdicts[portfolio.Paused] != 2 {
		t.Errorf("batch verdicts %v; want 7 new, 3 seen, 3 deferred, 2 paused", verdicts)
	}
	for _, p := range []string{"a", "b"} {
		s1, err1 := st.Status(ctx, "seq", p)
		s2, err2 := st.Status(ctx, "bat", p)
		if err1 != nil || err2 != nil {
			t.Fatal(err1, err2)
		}
		if s1.Used != s2.Used || s1.Deferred != s2.Deferred {
			t.Errorf("portfolio %s: batch used %d deferred %d; sequential used %d deferred %d", p, s2.Used, s2.Deferred, s1.Used, s1.Deferred)
		}
	}
}

// TestBatchEqualsSequential: the admissions of two portfolios queued in
// one ledger flush answer what Admit called one by one in the same order
// answers (verdict, window count, tier, deferred count; on miniredis's
// frozen clock scores and waits too), on miniredis, redis-server and
// Redis Cluster.
func TestBatchEqualsSequential(t *testing.T) {
	redistest.Each(t, func(t *testing.T, e *redistest.Env) {
		batchEqualsSequential(t, e.RDB, e.Prefix, e.Exact())
	})
	t.Run("cluster", func(t *testing.T) {
		rdb := redis.NewClusterClient(&redis.ClusterOptions{Addrs: testenv.ClusterAddrs(t)})
		defer rdb.Close()
		batchEqualsSequential(t, rdb, "tq"+time.Now().Format("150405.000000"), false)
	})
}

// trips counts what a client sends: pipelines, single commands, and the
// portfolio.lua calls among all commands (their admissions by ARGV).
type trips struct {
	pipelines, singles, scriptCalls, admissions atomic.Int64
}

var portfolioSHA = redis.NewScript(lua.Portfolio).Hash()

func (c *trips) count(cmd redis.Cmder) {
	a := cmd.Args()
	if len(a) > 3 && strings.HasPrefix(strings.ToLower(fmt.Sprint(a[0])), "eval") &&
		(a[1] == portfolioSHA || a[1] == lua.Portfolio) {
		c.scriptCalls.Add(1)
		n := fmt.Sprint(a[2]) // numkeys: 2; then op, window, pairs for "b"
		if n == "2" && a[3+2] == "b" {
			c.admissions.Add(int64(len(a)-3-2-2) / 2)
		} else {
			c.admissions.Add(1)
		}
	}
}

func (c *trips) DialHook(next redis.DialHook) redis.DialHook { return next }
func (c *trips) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		c.singles.Add(1)
		c.count(cmd)
		return next(ctx, cmd)
	}
}
func (c *trips) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		c.pipelines.Add(1)
		for _, cmd := range cmds {
			c.count(cmd)
		}
		return next(ctx, cmds)
	}
}

// TestBatchRidesLedgerFlush: 60 guarded messages (a ledger claim and an
// admission each, 40 to one portfolio and 20 to another) through one
// ledger.Batcher cost one round trip, the flush's pipeline, with two
// portfolio.lua calls in it: the guard adds no round trip and no script
// call per message. The admissions answer as Admit would (tier 30 of 40).
func TestBatchRidesLedgerFlush(t *testing.T) {
	e := redistest.Mini(t)
	e.MR.SetTime(time.Now()) // the ledger's claims check the caller's clock against Redis TIME
	ctx := context.Background()
	keys := bucket.NewKeys("")
	st := portfolio.NewStore(e.RDB, keys)
	for p, tier := range map[string]int{"acme": 30, "beta": 100} {
		if err := st.SetTier(ctx, "whatsapp", p, tier); err != nil {
			t.Fatal(err)
		}
	}
	led := ledger.NewBatcher(e.RDB, keys, ledger.BatchConfig{FlushInterval: time.Hour})
	defer led.Close(ctx)
	bt := st.Batched(led)
	// The scripts into Redis's cache: a first flush with one of each.
	pc := led.ClaimAsync("whatsapp", "106", "warm", "me", false)
	if _, err := bt.Admit(ctx, "whatsapp", "beta", suppress.Hash("warm"), false, time.Now()); err != nil {
		t.Fatal(err)
	}
	if _, _, err := pc.Wait(ctx); err != nil {
		t.Fatal(err)
	}
	c := &trips{}
	e.RDB.AddHook(c)

	const n = 60
	var ms []msg
	claims := make([]*ledger.PendingClaim, n)
	for i := range n {
		p := "acme"
		if i%3 == 2 {
			p = "beta"
		}
		ms = append(ms, msg{p, fmt.Sprint("r", i), false})
		claims[i] = led.ClaimAsync("whatsapp", "106", fmt.Sprint("id", i), "me", false)
	}
	got := queueInOrder(t, bt, led, "whatsapp", ms)
	for i, pc := range claims {
		if r, _, err := pc.Wait(ctx); err != nil || r != ledger.Claimed {
			t.Fatalf("claim %d: %v %v; want claimed", i, r, err)
		}
	}
	admitted := map[string]int{}
	for i, a := range got {
		if a.Verdict == portfolio.New {
			admitted[ms[i].portfolio]++
		}
	}
	if admitted["acme"] != 30 || admitted["beta"] != 20 {
		t.Errorf("admitted %v; want acme 30 (its tier), beta 20", admitted)
	}
	if p, s, calls, adm := c.pipelines.Load(), c.singles.Load(), c.scriptCalls.Load(), c.admissions.Load(); p != 1 || s != 0 || calls != 2 || adm != n {
		t.Errorf("%d messages: %d pipelines, %d commands alone, %d portfolio.lua calls for %d admissions; want 1 pipeline (the ledger's flush), 0 alone, 2 calls (one per portfolio) for %d",
			n, p, s, calls, adm, n)
	}
}

// TestBatchAfterScriptFlush: a flush that finds the ledger's and the
// guard's scripts gone from Redis's cache (a restart, SCRIPT FLUSH) sends
// them again with their text: the claim and the admissions still answer,
// none fails with NOSCRIPT.
func TestBatchAfterScriptFlush(t *testing.T) {
	redistest.Each(t, func(t *testing.T, e *redistest.Env) {
		if e.Exact() {
			e.MR.SetTime(time.Now()) // the ledger's claims check the caller's clock against Redis TIME
		}
		ctx := context.Background()
		keys := bucket.NewKeys(e.Prefix)
		st := portfolio.NewStore(e.RDB, keys)
		if err := st.SetTier(ctx, "whatsapp", "acme", 2); err != nil {
			t.Fatal(err)
		}
		led := ledger.NewBatcher(e.RDB, keys, ledger.BatchConfig{FlushInterval: time.Hour})
		defer led.Close(ctx)
		bt := st.Batched(led)
		first := queueInOrder(t, bt, led, "whatsapp", []msg{{"acme", "u1", false}}) // both scripts cached
		if err := e.RDB.ScriptFlush(ctx).Err(); err != nil {
			t.Fatal(err)
		}
		pc := led.ClaimAsync("whatsapp", "106", "id1", "me", false)
		got := queueInOrder(t, bt, led, "whatsapp", []msg{{"acme", "u2", false}, {"acme", "u3", false}})
		if r, _, err := pc.Wait(ctx); err != nil || r != ledger.Claimed {
			t.Errorf("claim after SCRIPT FLUSH: %v, %v; want claimed", r, err)
		}
		if first[0].Verdict != portfolio.New || got[0].Verdict != portfolio.New || got[0].Used != 2 || got[1].Verdict != portfolio.Deferred {
			t.Errorf("admissions %+v, then after SCRIPT FLUSH %+v; want new, then new (2 of 2) and deferred", first, got)
		}
	})
}
