package consumer_test

import (
	"context"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/pacerhq/pacer/bucket"
	"github.com/pacerhq/pacer/channels"
	"github.com/pacerhq/pacer/pacer/consumer"
	"github.com/pacerhq/pacer/pacer/portfolio"
	"github.com/redis/go-redis/v9"
)

// TestPortfolioGuard: k1's portfolio has tier 3. A template refused for
// good gives its recipient back; of four templates to new recipients
// three are sent and one deferred (parked: not sent, not dead-lettered),
// while a service message and a repeat to a recipient in the window go
// out; once the window has passed, the deferred one is sent.
func TestPortfolioGuard(t *testing.T) {
	bad := &channels.Error{Channel: "test", Status: 400, Code: "BAD", Class: channels.Permanent}
	h := newHarness(t, map[string][]error{"p1": {bad}})
	rdb := h.redis()
	// Long enough that p1's entry is still in the window when its give-back
	// is checked (within window/2), and that the fourth template is still
	// deferred when the others are seen sent on a loaded machine; short
	// enough to wait out.
	const window = 10 * time.Second
	st := portfolio.NewStore(rdb, bucket.NewKeys("")).WithWindow(window)
	h.portfolios = st
	ctx := context.Background()
	if err := st.Set(ctx, "test", "k1", "acme", 3); err != nil {
		t.Fatal(err)
	}
	tmpl := func(id, to string) string {
		return fmt.Sprintf(`{"id":%q,"key":"k1","to":%q,"payload":{"type":"template","template":{"name":"t"}}}`, id, to)
	}
	used := func() int {
		s, err := st.Status(ctx, "test", "acme")
		if err != nil {
			t.Fatal(err)
		}
		return s.Used
	}
	p, stop := h.start(h.cfg, h.sender, h.reg)
	defer stop()
	<-p.Started()
	h.produce(tmpl("p1", "r0"))
	if got := h.dlq(1); got[tmpl("p1", "r0")] != "permanent:BAD" {
		t.Fatalf("DLQ %v; want p1 permanent:BAD", got)
	}
	if !waitFor(window/2, func() bool { return used() == 0 }) {
		t.Fatalf("after p1's permanent failure the window holds %d; want 0 (given back)", used())
	}
	h.produce(tmpl("t1", "r1"), tmpl("t2", "r2"), tmpl("t3", "r3"), tmpl("t4", "r4"),
		`{"id":"s1","key":"k1","to":"r9","category":"service","payload":{"type":"text","text":{"body":"hi"}}}`)
	sentOf := func(ids ...string) (n int, which string) {
		for _, id := range ids {
			if h.sender.count(h.sender.success, id) == 1 {
				n++
				which = id
			}
		}
		return n, which
	}
	// The deferred template comes back and is deferred again at each look
	// until the window passes: the counter counts deferrals, at least one.
	if !waitFor(20*time.Second, func() bool {
		n, _ := sentOf("t1", "t2", "t3", "t4", "s1")
		return n == 4 && h.counter("pacer_portfolio_deferred_total") >= 1
	}) {
		n, _ := sentOf("t1", "t2", "t3", "t4", "s1")
		t.Fatalf("%d of t1-t4, s1 sent, %v deferrals; want 4 sent (3 templates and s1) and at least 1 deferral", n, h.counter("pacer_portfolio_deferred_total"))
	}
	if n, _ := sentOf("t1", "t2", "t3", "t4"); n != 3 || used() != 3 {
		t.Fatalf("%d templates sent, window %d; want 3 and 3", n, used())
	}
	if g := h.gauge("pacer_portfolio_used_ratio"); g != 1 {
		t.Errorf("pacer_portfolio_used_ratio %v; want 1", g)
	}
	_, last := sentOf("t1", "t2", "t3", "t4")
	again := tmpl("again", map[string]string{"t1": "r1", "t2": "r2", "t3": "r3", "t4": "r4"}[last])
	h.produce(again)
	if !waitFor(10*time.Second, func() bool { return h.sender.count(h.sender.success, "again") == 1 }) {
		t.Fatal("a template to a recipient in the window was not sent")
	}
	if !waitFor(window+15*time.Second, func() bool { n, _ := sentOf("t1", "t2", "t3", "t4"); return n == 4 }) {
		t.Fatal("the deferred template was not sent after the window")
	}
	if n := h.dlqRecords(); n != 1 {
		t.Errorf("%d DLQ records; want 1 (p1 only)", n)
	}
}

// TestPortfolioQualityPause: k1's portfolio had a quality downgrade with
// the pause on. Its marketing template is deferred ("portfolio-quality":
// parked, counted in the portfolio's deferred, not sent) while a utility
// template and a service message go out; once the operator resumes the
// portfolio, the marketing template is sent at its next check.
func TestPortfolioQualityPause(t *testing.T) {
	consumer.SetQualityRecheck(t, time.Second)
	h := newHarness(t, nil)
	rdb := h.redis()
	st := portfolio.NewStore(rdb, bucket.NewKeys(""))
	h.portfolios = st
	ctx := context.Background()
	if err := st.Set(ctx, "test", "k1", "acme", 0); err != nil {
		t.Fatal(err)
	}
	if err := st.SetQuality(ctx, "test", "acme", portfolio.Flagged, time.Unix(1_800_000_000, 0), true); err != nil {
		t.Fatal(err)
	}
	p, stop := h.start(h.cfg, h.sender, h.reg)
	defer stop()
	<-p.Started()
	h.produce(`{"id":"m1","key":"k1","to":"r1","category":"marketing","payload":{"type":"template","template":{"name":"t"}}}`,
		`{"id":"u1","key":"k1","to":"r2","category":"utility","payload":{"type":"template","template":{"name":"t"}}}`,
		`{"id":"s1","key":"k1","to":"r3","category":"service","payload":{"type":"text","text":{"body":"hi"}}}`)
	if !waitFor(20*time.Second, func() bool {
		return h.sender.count(h.sender.success, "u1") == 1 && h.sender.count(h.sender.success, "s1") == 1 &&
			h.counter("pacer_requeued_total", "reason", "portfolio-quality") >= 1
	}) {
		t.Fatalf("u1 sent %d, s1 sent %d, requeued portfolio-quality %v; want 1, 1 and >= 1",
			h.sender.count(h.sender.success, "u1"), h.sender.count(h.sender.success, "s1"), h.counter("pacer_requeued_total", "reason", "portfolio-quality"))
	}
	if n := h.sender.count(h.sender.success, "m1"); n != 0 {
		t.Fatalf("the marketing template was sent %d times while its portfolio's marketing was paused", n)
	}
	s, err := st.Status(ctx, "test", "acme")
	if err != nil || s.Deferred < 1 || s.Paused != portfolio.Flagged || s.Quality != portfolio.Flagged {
		t.Fatalf("status %+v %v; want deferred >= 1, paused and quality FLAGGED", s, err)
	}
	if ok, err := st.Resume(ctx, "test", "acme"); err != nil || !ok {
		t.Fatalf("Resume = %v %v; want true (it was paused)", ok, err)
	}
	if !waitFor(20*time.Second, func() bool { return h.sender.count(h.sender.success, "m1") == 1 }) {
		t.Fatal("the marketing template was not sent after the resume")
	}
	if n := h.dlqRecords(); n != 0 {
		t.Errorf("%d DLQ records; want none", n)
	}
}

// guardCalls counts a client's portfolio.lua calls on window (a command
// naming it): those sent alone (a round trip of their own) and the
// admissions of those answered without error in a pipeline.
type guardCalls struct {
	window             string
	alone, inPipelines atomic.Int64
}

func (g *guardCalls) admissions(c redis.Cmder) int64 {
	a := c.Args()
	if len(a) < 6 || !strings.HasPrefix(c.Name(), "eval") || a[3] != g.window {
		return 0
	}
	if a[5] == "b" { // eval, script, 2, window, hash, "b", window_ms, pairs of hash, marketing
		return int64(len(a)-7) / 2
	}
	return 1
}

func (g *guardCalls) DialHook(next redis.DialHook) redis.DialHook { return next }
func (g *guardCalls) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		g.alone.Add(g.admissions(cmd))
		return next(ctx, cmd)
	}
}
func (g *guardCalls) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		err := next(ctx, cmds)
		for _, c := range cmds {
			if c.Err() == nil {
				g.inPipelines.Add(g.admissions(c))
			}
		}
		return err
	}
}

// TestPortfolioGuardRidesLedgerFlush: 40 templates of a key in a
// portfolio are each admitted once, all in the ledger's flush pipelines
// (or the pipeline that sends a call again with the script's text after
// NOSCRIPT): no admission is a Redis call of its own.
func TestPortfolioGuardRidesLedgerFlush(t *testing.T) {
	h := newHarness(t, nil)
	keys := bucket.NewKeys("")
	calls := &guardCalls{window: keys.PortfolioWindow("test", "acme")}
	h.batchHook = calls
	rdb := h.redis()
	rdb.AddHook(calls)
	st := portfolio.NewStore(rdb, keys)
	h.portfolios = st
	if err := st.Set(context.Background(), "test", "k1", "acme", 1000); err != nil {
		t.Fatal(err)
	}
	p, stop := h.start(h.cfg, h.sender, h.reg)
	defer stop()
	<-p.Started()
	const n = 40
	var msgs []string
	for i := range n {
		msgs = append(msgs, fmt.Sprintf(`{"id":"t%d","key":"k1","to":"r%d","payload":{"type":"template","template":{"name":"t"}}}`, i, i))
	}
	h.produce(msgs...)
	sent := func() (k int) {
		for i := range n {
			k += h.sender.count(h.sender.success, fmt.Sprint("t", i))
		}
		return k
	}
	if !waitFor(20*time.Second, func() bool { return sent() == n }) {
		t.Fatalf("%d of %d templates sent", sent(), n)
	}
	if a, in := calls.alone.Load(), calls.inPipelines.Load(); a != 0 || in != n {
		t.Errorf("%d templates: %d admissions in calls of their own, %d in pipelines; want 0 and %d (each once, in the ledger's flush)", n, a, in, n)
	}
}
