package ledger_test

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"maps"
	"net"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/pacerhq/pacer/bucket"
	"github.com/pacerhq/pacer/internal/redistest"
	"github.com/pacerhq/pacer/internal/testenv"
	"github.com/pacerhq/pacer/pacer/consumer"
	"github.com/pacerhq/pacer/pacer/control"
	"github.com/pacerhq/pacer/pacer/ledger"
	"github.com/redis/go-redis/v9"
)

// servers returns a miniredis client and a redis-server client, each with
// its own key prefix.
func servers(t *testing.T) map[string]struct {
	rdb  *redis.Client
	keys bucket.Keys
} {
	mr := miniredis.RunT(t)
	out := map[string]struct {
		rdb  *redis.Client
		keys bucket.Keys
	}{}
	for name, o := range map[string]*redis.Options{
		"miniredis":    {Addr: mr.Addr()},
		"redis-server": {Addr: testenv.RedisAddr(t), DB: testenv.RedisDB},
	} {
		rdb := redis.NewClient(o)
		t.Cleanup(func() { rdb.Close() })
		out[name] = struct {
			rdb  *redis.Client
			keys bucket.Keys
		}{rdb, bucket.NewKeys("tb" + t.Name() + time.Now().Format("150405.000000"))}
	}
	return out
}

// entries returns every ledger field under keys' prefix (Redis keys
// "<prefix>:{...}:ids:<generation>") and its value; a field held by two
// generations is named "<generation>/<field>" for the older one.
func entries(t *testing.T, rdb redis.Cmdable, keys bucket.Keys) map[string]string {
	t.Helper()
	hashes, err := rdb.Keys(t.Context(), keys.Prefix()+":{*}:ids:*").Result()
	if err != nil {
		t.Fatal(err)
	}
	slices.Sort(hashes)
	slices.Reverse(hashes) // the newest generation first (same digit count)
	out := map[string]string{}
	for _, h := range hashes {
		m, err := rdb.HGetAll(t.Context(), h).Result()
		if err != nil {
			t.Fatal(err)
		}
		for f, v := range m {
			if _, ok := out[f]; ok {
				f = h[strings.LastIndex(h, ":")+1:] + "/" + f
			}
			out[f] = v
		}
	}
	return out
}

func closeBatcher(t *testing.T, b *ledger.Batcher) {
	t.Helper()
	testenv.CloseWithin(t, 10*time.Second, "Close", b.Close)
}

// TestBatcherSteps: through a Batcher, each step answers as through the
// Ledger (TestLedgerSteps), though marks and releases are only queued.
func TestBatcherSteps(t *testing.T) {
	for name, s := range servers(t) {
		t.Run(name, func(t *testing.T) {
			b := ledger.NewBatcher(s.rdb, s.keys, ledger.BatchConfig{FlushInterval: 2 * time.Millisecond})
			defer closeBatcher(t, b)
			checkSteps(t, b)
		})
	}
}

// TestBatcherRoundTrips: 200 goroutines each claim an id (of 20 pacing
// keys) and mark it delivered; the 400 operations take a handful of round
// trips, not 400, and every answer is right.
func TestBatcherRoundTrips(t *testing.T) {
	for name, s := range servers(t) {
		t.Run(name, func(t *testing.T) {
			trips := new(redistest.Trips) // every request: one per command, one per pipeline
			s.rdb.AddHook(trips)
			if err := s.rdb.Ping(t.Context()).Err(); err != nil {
				t.Fatal(err)
			}
			// A long interval and a large batch: a flush every 100 ms at most,
			// so the count does not depend on how fast the goroutines start.
			b := ledger.NewBatcher(s.rdb, s.keys, ledger.BatchConfig{FlushInterval: 100 * time.Millisecond, MaxBatch: 1000})
			defer closeBatcher(t, b)
			base := trips.Load()
			const n = 200
			var wg sync.WaitGroup
			errs := make(chan error, n)
			for i := range n {
				wg.Go(func() {
					key, id := fmt.Sprint(106+i%20), fmt.Sprint("m", i)
					got, _, err := b.Claim(t.Context(), "whatsapp", key, id, "a", false)
					if err != nil || got != ledger.Claimed {
						errs <- fmt.Errorf("claim %s: %v, %v", id, got, err)
						return
					}
					if err := b.Delivered(t.Context(), "whatsapp", key, id, "w"); err != nil {
						errs <- err
					}
				})
			}
			wg.Wait()
			close(errs)
			for err := range errs {
				t.Fatal(err)
			}
			closeBatcher(t, b)
			// Whatever the scheduling: the claims take one flush each 100 ms
			// (at most a few, a script load each the first time), the marks
			// one more.
			if got := trips.Load() - base; got > 12 {
				t.Errorf("%d claims and %d marks took %d round trips; want at most 12", n, n, got)
			} else {
				t.Logf("%d claims and %d marks: %d round trips", n, n, got)
			}
			l := ledger.New(s.rdb, s.keys, 0)
			for i := range n {
				if got, _, err := l.Claim(t.Context(), "whatsapp", fmt.Sprint(106+i%20), fmt.Sprint("m", i), "b", false); err != nil || got != ledger.Delivered {
					t.Fatalf("id m%d after the batch: %v, %v; want delivered", i, got, err)
				}
			}
		})
	}
}

// TestBatcherMarkBeforeClaim: a claim queued after a delivered mark of the
// same id, in the same flush, sees the mark; a release before a claim by
// another owner frees the id for it.
func TestBatcherMarkBeforeClaim(t *testing.T) {
	for name, s := range servers(t) {
		t.Run(name, func(t *testing.T) {
			ctx := context.Background()
			l := ledger.New(s.rdb, s.keys, 0)
			if got, _, err := l.Claim(ctx, "whatsapp", "106", "m1", "a", false); err != nil || got != ledger.Claimed {
				t.Fatalf("claim: %v %v", got, err)
			}
			if got, _, err := l.Claim(ctx, "whatsapp", "106", "m2", "a", false); err != nil || got != ledger.Claimed {
				t.Fatalf("claim: %v %v", got, err)
			}
			b := ledger.NewBatcher(s.rdb, s.keys, ledger.BatchConfig{FlushInterval: 50 * time.Millisecond})
			defer closeBatcher(t, b)
			b.Delivered(ctx, "whatsapp", "106", "m1", "w")
			b.Release(ctx, "whatsapp", "106", "m2", "a")
			p1 := b.ClaimAsync("whatsapp", "106", "m1", "a", false)
			p2 := b.ClaimAsync("whatsapp", "106", "m2", "b", false)
			if got, _, err := p1.Wait(ctx); err != nil || got != ledger.Delivered {
				t.Errorf("claim after the mark in one flush: %v, %v; want delivered", got, err)
			}
			if got, _, err := p2.Wait(ctx); err != nil || got != ledger.Claimed {
				t.Errorf("claim by b after a's release in one flush: %v, %v; want claimed", got, err)
			}
		})
	}
}

// TestBatcherCancel: a claim cancelled before its flush writes nothing; one
// whose context ends before its flush is cancelled likewise.
func TestBatcherCancel(t *testing.T) {
	for name, s := range servers(t) {
		t.Run(name, func(t *testing.T) {
			b := ledger.NewBatcher(s.rdb, s.keys, ledger.BatchConfig{FlushInterval: 200 * time.Millisecond})
			defer closeBatcher(t, b)
			pc := b.ClaimAsync("whatsapp", "106", "m1", "a", false)
			if !pc.Cancel() {
				t.Fatal("Cancel before the flush = false")
			}
			if got, _, err := pc.Wait(t.Context()); got != ledger.ClaimUnknown || err == nil {
				t.Fatalf("Wait after Cancel = %v, %v; want unknown and an error", got, err)
			}
			ctx, cancel := context.WithCancel(t.Context())
			cancel()
			if got, _, err := b.Claim(ctx, "whatsapp", "106", "m2", "a", false); got != ledger.ClaimUnknown || err == nil {
				t.Fatalf("Claim with an ended context = %v, %v; want unknown and an error", got, err)
			}
			time.Sleep(400 * time.Millisecond) // a flush, had they stayed queued
			if got := entries(t, s.rdb, s.keys); len(got) != 0 {
				t.Errorf("cancelled claims left entries: %v", got)
			}
			// Other owners can claim them: nothing was written.
			if got, _, err := b.Claim(t.Context(), "whatsapp", "106", "m1", "b", false); err != nil || got != ledger.Claimed {
				t.Fatalf("claim by b after a's cancel = %v, %v; want claimed", got, err)
			}
		})
	}
}

// TestBatcherCrash is what a crash means with a flush interval: a process
// that claimed an id, sent it, and died before its delivered mark was
// flushed leaves its claim, so the next owner reads the id as abandoned
// (unknown outcome: dead-lettered, or resent only with force) and never as
// free; the marks of the last flush interval are all a crash can lose.
func TestBatcherCrash(t *testing.T) {
	for name, s := range servers(t) {
		t.Run(name, func(t *testing.T) {
			a := ledger.NewBatcher(s.rdb, s.keys, ledger.BatchConfig{FlushInterval: time.Hour})
			l := ledger.New(s.rdb, s.keys, 0)
			// The claim went out (its own flush; here written directly), the
			// request left, the mark waits for a flush an hour away.
			if got, _, err := l.Claim(t.Context(), "whatsapp", "106", "m1", "a", false); err != nil || got != ledger.Claimed {
				t.Fatalf("claim: %v %v", got, err)
			}
			a.Delivered(t.Context(), "whatsapp", "106", "m1", "w")
			// The crash: the process ends without a flush.
			dead, cancel := context.WithCancel(context.Background())
			cancel()
			if err := a.Close(dead); err == nil {
				t.Fatal("Close with an ended context wrote everything; want the mark lost")
			}
			b := ledger.New(s.rdb, s.keys, 0)
			if got, _, err := b.Claim(t.Context(), "whatsapp", "106", "m1", "b", false); err != nil || got != ledger.Abandoned {
				t.Fatalf("next owner's claim = %v, %v; want abandoned (unknown outcome), never claimed", got, err)
			}
			if got, _, err := b.Claim(t.Context(), "whatsapp", "106", "m1", "b", true); err != nil || got != ledger.Claimed {
				t.Fatalf("next owner's forced claim = %v, %v; want claimed (UnknownOutcome resend)", got, err)
			}
		})
	}
}

// TestBatcherRedisDown: while Redis fails, claims answer an error (never
// Claimed) and a delivered mark is kept and tried again; claims queued
// behind a failed mark fail too, so none passes it; once Redis answers the
// mark is written.
func TestBatcherRedisDown(t *testing.T) {
	mr := miniredis.RunT(t)
	rdb := redis.NewClient(&redis.Options{Addr: mr.Addr(), MaxRetries: -1})
	defer rdb.Close()
	var reported atomic.Int64
	b := ledger.NewBatcher(rdb, bucket.Keys{}, ledger.BatchConfig{FlushInterval: time.Millisecond,
		OnError: func(error) { reported.Add(1) }})
	defer closeBatcher(t, b)
	if got, _, err := b.Claim(t.Context(), "whatsapp", "106", "m1", "a", false); err != nil || got != ledger.Claimed {
		t.Fatalf("claim: %v %v", got, err)
	}
	mr.SetError("LOADING Redis is loading the dataset in memory")
	b.Delivered(t.Context(), "whatsapp", "106", "m1", "w")
	got, _, err := b.Claim(t.Context(), "whatsapp", "106", "m1", "a", false)
	if err == nil || got != ledger.ClaimUnknown {
		t.Fatalf("claim while Redis fails = %v, %v; want unknown and an error", got, err)
	}
	// The flush answers its claims before it reports its failed marks.
	deadline := time.Now().Add(10 * time.Second)
	for reported.Load() == 0 && time.Now().Before(deadline) {
		time.Sleep(time.Millisecond)
	}
	if reported.Load() == 0 {
		t.Error("a failed mark was not reported")
	}
	mr.SetError("")
	for {
		if entries(t, rdb, bucket.Keys{})["106\nm1"] == "d:w" {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the mark was not written once Redis answered")
		}
		time.Sleep(10 * time.Millisecond)
	}
	if got, _, err := b.Claim(t.Context(), "whatsapp", "106", "m1", "a", false); err != nil || got != ledger.Delivered {
		t.Fatalf("claim after the mark = %v, %v; want delivered", got, err)
	}
}

// TestBatcherCooldownPerKey: one flush claims ids of several pacing keys;
// only the ids of the key in cooldown answer cooldown, and nothing of
// theirs is written.
func TestBatcherCooldownPerKey(t *testing.T) {
	for name, s := range servers(t) {
		t.Run(name, func(t *testing.T) {
			ctx := context.Background()
			lim := bucket.New(s.rdb, bucket.Config{Prefix: s.keys.Prefix()})
			if err := lim.Cooldown(ctx, "whatsapp", "107", 2*time.Second); err != nil {
				t.Fatal(err)
			}
			b := ledger.NewBatcher(s.rdb, s.keys, ledger.BatchConfig{FlushInterval: 50 * time.Millisecond})
			defer closeBatcher(t, b)
			var pcs []*ledger.PendingClaim
			for i := range 6 {
				pcs = append(pcs, b.ClaimAsync("whatsapp", fmt.Sprint(106+i%3), fmt.Sprint("m", i), "a", false))
			}
			for i, pc := range pcs {
				got, left, err := pc.Wait(ctx)
				want := ledger.Claimed
				if i%3 == 1 {
					want = ledger.CoolingDown
				}
				if err != nil || got != want || (want == ledger.CoolingDown && (left <= time.Second || left > 2*time.Second)) {
					t.Errorf("id m%d of key %d: %v, %v, %v; want %v", i, 106+i%3, got, left, err, want)
				}
			}
			want := map[string]string{"106\nm0": "c:a", "108\nm2": "c:a", "106\nm3": "c:a", "108\nm5": "c:a"}
			if got := entries(t, s.rdb, s.keys); !maps.Equal(got, want) {
				t.Errorf("entries %q; want %q (nothing for the key in cooldown)", got, want)
			}
		})
	}
}

// TestBatcherCluster: under Redis Cluster a flush claims each pacing key's
// ids in a call of their own (one slot each), so ids of many keys claim
// and mark without a CROSSSLOT error.
func TestBatcherCluster(t *testing.T) {
	rdb := redis.NewClusterClient(&redis.ClusterOptions{Addrs: testenv.ClusterAddrs(t)})
	defer rdb.Close()
	keys := bucket.NewKeys("tbc" + time.Now().Format("150405.000000"))
	b := ledger.NewBatcher(rdb, keys, ledger.BatchConfig{FlushInterval: 20 * time.Millisecond})
	defer closeBatcher(t, b)
	var pcs []*ledger.PendingClaim
	for i := range 40 {
		pcs = append(pcs, b.ClaimAsync("whatsapp", fmt.Sprint(106+i%10), fmt.Sprint("m", i), "a", false))
	}
	for i, pc := range pcs {
		if got, _, err := pc.Wait(t.Context()); err != nil || got != ledger.Claimed {
			t.Fatalf("id m%d: %v, %v; want claimed", i, got, err)
		}
		b.Delivered(t.Context(), "whatsapp", fmt.Sprint(106+i%10), fmt.Sprint("m", i), "w")
	}
	for i := range 40 {
		if got, _, err := b.Claim(t.Context(), "whatsapp", fmt.Sprint(106+i%10), fmt.Sprint("m", i), "b", false); err != nil || got != ledger.Delivered {
			t.Fatalf("id m%d after its mark: %v, %v; want delivered", i, got, err)
		}
	}
}

// TestBatcherFlush: Flush sends a claim at once rather than at the end of
// the interval (here an hour).
func TestBatcherFlush(t *testing.T) {
	mr := miniredis.RunT(t)
	rdb := redis.NewClient(&redis.Options{Addr: mr.Addr()})
	defer rdb.Close()
	b := ledger.NewBatcher(rdb, bucket.Keys{}, ledger.BatchConfig{FlushInterval: time.Hour})
	defer closeBatcher(t, b)
	pc := b.ClaimAsync("whatsapp", "106", "m1", "a", false)
	b.Flush()
	wantClaimed(t, pc, "Flush")
}

// wantClaimed fails t unless pc answers Claimed within 10 s of after (what
// should have sent it).
func wantClaimed(t *testing.T, pc *ledger.PendingClaim, after string) {
	t.Helper()
	select {
	case <-pc.Done():
	case <-time.After(10 * time.Second):
		t.Fatalf("no answer 10 s after %s", after)
	}
	if got, _, err := pc.Wait(t.Context()); err != nil || got != ledger.Claimed {
		t.Fatalf("claim = %v, %v; want claimed", got, err)
	}
}

// TestBatcherFlushBy: FlushBy has a claim sent by its time (here 200 ms
// ahead, the interval an hour), and a claim made meanwhile goes in the same
// flush: one round trip for both.
func TestBatcherFlushBy(t *testing.T) {
	mr := miniredis.RunT(t)
	rdb := redis.NewClient(&redis.Options{Addr: mr.Addr()})
	defer rdb.Close()
	flushes := &redistest.Trips{Match: redistest.StartsEvalSha} // the flushes
	rdb.AddHook(flushes)
	b := ledger.NewBatcher(rdb, bucket.Keys{}, ledger.BatchConfig{FlushInterval: time.Hour})
	defer closeBatcher(t, b)
	start := time.Now()
	p1 := b.ClaimAsync("whatsapp", "106", "m1", "a", false)
	b.FlushBy(start.Add(200 * time.Millisecond))
	p2 := b.ClaimAsync("whatsapp", "107", "m2", "a", false)
	for _, pc := range []*ledger.PendingClaim{p1, p2} {
		wantClaimed(t, pc, "FlushBy 200 ms ahead")
	}
	if took := time.Since(start); took < 150*time.Millisecond {
		t.Errorf("answered after %v: the flush did not wait for its time (200 ms)", took)
	}
	if n := flushes.Load(); n != 1 {
		t.Errorf("%d flushes for two claims; want 1", n)
	}
}

// TestBatcherCommandsPerFlush: a flush costs a fixed handful of Redis
// commands whatever the number of ids it carries (one ledger.lua call: an
// MGET of the cooldowns, an HMGET per generation read, one HSET, one
// PEXPIREAT), not one per id: 200 claims and 200 delivered marks of 20
// pacing keys take at most 10 commands naming the ledger's keys per flush
// (MONITOR on redis-server, the EVALSHA included; TIME names no key).
func TestBatcherCommandsPerFlush(t *testing.T) {
	o := &redis.Options{Addr: testenv.RedisAddr(t), DB: testenv.RedisDB}
	keys := bucket.NewKeys("tcmd" + time.Now().Format("150405.000000"))
	rdb := redis.NewClient(o)
	defer rdb.Close()
	// The script in the server's cache first, so no flush sends it again.
	if _, _, err := ledger.New(rdb, bucket.NewKeys(keys.Prefix()+"warm"), 0).Claim(t.Context(), "whatsapp", "1", "w", "a", false); err != nil {
		t.Fatal(err)
	}
	// MONITOR on a connection of its own: every command the server runs,
	// those of scripts included, one line each.
	mon, err := net.Dial("tcp", o.Addr)
	if err != nil {
		t.Fatal(err)
	}
	defer mon.Close()
	if _, err := mon.Write([]byte("MONITOR\r\n")); err != nil {
		t.Fatal(err)
	}
	rd := bufio.NewReader(mon)
	if l, err := rd.ReadString('\n'); err != nil || !strings.HasPrefix(l, "+OK") {
		t.Fatalf("MONITOR: %q, %v", l, err)
	}
	var named atomic.Int64 // lines naming the ledger's keys
	go func() {
		for {
			l, err := rd.ReadString('\n')
			if err != nil {
				return
			}
			if strings.Contains(l, keys.Prefix()+":{") {
				named.Add(1)
			}
		}
	}()
	flushes := &redistest.Trips{Match: redistest.StartsEvalSha} // the flushes
	rdb.AddHook(flushes)
	b := ledger.NewBatcher(rdb, keys, ledger.BatchConfig{FlushInterval: 100 * time.Millisecond, MaxBatch: 1000})
	var wg sync.WaitGroup
	for i := range 200 {
		wg.Go(func() {
			key, id := fmt.Sprint(106+i%20), fmt.Sprint("m", i)
			if got, _, err := b.Claim(t.Context(), "whatsapp", key, id, "a", false); err != nil || got != ledger.Claimed {
				t.Errorf("claim %s: %v, %v", id, got, err)
			}
			b.Delivered(t.Context(), "whatsapp", key, id, "w")
		})
	}
	wg.Wait()
	closeBatcher(t, b)
	time.Sleep(300 * time.Millisecond) // the last lines are read
	n := int(named.Load())
	f := flushes.Load()
	if f == 0 || n > 10*int(f) {
		t.Errorf("200 claims and 200 marks: %d commands naming the ledger's keys in %d flushes; want at most 10 a flush", n, f)
	} else {
		t.Logf("200 claims and 200 marks: %d commands naming the ledger's keys in %d flushes", n, f)
	}
	ids, pids := 0, 0 // ids, and the provider-id fields of their marks (one of provider id "w" per pacing key)
	for f := range entries(t, rdb, keys) {
		if strings.Contains(f, "\x01") {
			pids++
		} else {
			ids++
		}
	}
	if ids != 200 || pids != 20 {
		t.Errorf("%d ids and %d provider-id fields recorded; want 200 and 20", ids, pids)
	}
}

// killSwitch is a process's connection to Redis that dies once its
// after-th flush with delivered marks has been written: nothing it sends
// later reaches Redis (a kill -9 right after that flush).
type killSwitch struct {
	after  int64
	n      atomic.Int64
	killed atomic.Bool
}

var errKilled = fmt.Errorf("the process was killed")

func (h *killSwitch) DialHook(next redis.DialHook) redis.DialHook { return next }
func (h *killSwitch) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		if h.killed.Load() {
			cmd.SetErr(errKilled)
			return errKilled
		}
		return next(ctx, cmd)
	}
}
func (h *killSwitch) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		if h.killed.Load() {
			for _, c := range cmds {
				c.SetErr(errKilled)
			}
			return errKilled
		}
		err := next(ctx, cmds)
		for _, c := range cmds {
			if c.Name() == "evalsha" && slices.ContainsFunc(c.Args(), func(a any) bool { return a == "d" }) {
				if h.n.Add(1) >= h.after {
					h.killed.Store(true)
				}
				break
			}
		}
		return err
	}
}

// campaignCounts is the CountWriter a pacer runs: the campaign counters
// of control.Store on rdb under keys, channel whatsapp.
func campaignCounts(rdb redis.UniversalClient, keys bucket.Keys) ledger.CountWriter {
	return consumer.CampaignCounts(control.New(rdb, keys), "whatsapp")
}

// TestBatcherCountsWithMarks: a count queued with a delivered mark is
// written in the flush that writes the mark, so when the process dies (its
// connection cut right after its third flush of marks, the later ones
// queued and never written, the Batcher never closed) the counts in Redis
// equal the ids the ledger holds as delivered: none counted without its
// mark, none marked without its count. Also under Redis Cluster, where the
// count's key is in another slot than the marks'.
func TestBatcherCountsWithMarks(t *testing.T) {
	for name, s := range countTargets(t, "tbk") {
		t.Run(name, func(t *testing.T) {
			var kill killSwitch
			kill.after = 3
			rdb := ownClient(t, s.rdb)
			rdb.AddHook(&kill)
			counter := s.keys.Campaign("whatsapp", "spring")
			b := ledger.NewBatcher(rdb, s.keys, ledger.BatchConfig{FlushInterval: time.Millisecond, Count: campaignCounts(rdb, s.keys)})
			if !b.Counting() {
				t.Fatal("Counting() = false with a Count writer")
			}
			// Marks come, 20 at a time, while flushes go, until the kill and
			// 20 more after it (never written).
			total, after := 0, 0
			deadline := time.Now().Add(20 * time.Second)
			for after < 20 {
				for range 20 {
					if err := b.DeliveredCounted(t.Context(), "whatsapp", fmt.Sprint(106+total%7), fmt.Sprint("m", total), "w",
						ledger.Count{Name: "spring", Field: "delivered", At: time.Now().UnixMilli()}); err != nil {
						t.Fatal(err)
					}
					total++
					if kill.killed.Load() {
						after++
					}
				}
				if time.Now().After(deadline) {
					t.Fatal("the third flush of marks did not come within 20 s")
				}
				time.Sleep(2 * time.Millisecond)
			}
			// The process is gone: the Batcher is never closed. Read what
			// Redis holds.
			l := ledger.New(s.rdb, s.keys, 0)
			marked := 0
			for i := range total {
				ok, err := l.IsDelivered(t.Context(), "whatsapp", fmt.Sprint(106+i%7), fmt.Sprint("m", i))
				if err != nil {
					t.Fatal(err)
				}
				if ok {
					marked++
				}
			}
			counted, err := s.rdb.HGet(t.Context(), counter, "delivered").Int()
			if err != nil && err != redis.Nil {
				t.Fatal(err)
			}
			t.Logf("%d of %d marked delivered, %d counted", marked, total, counted)
			if marked == 0 || marked == total {
				t.Fatalf("%d of %d marked delivered: the kill hit no flush in the middle of the marks", marked, total)
			}
			if counted != marked {
				t.Errorf("campaign count %d, ledger holds %d delivered: counts and marks disagree after the kill", counted, marked)
			}
		})
	}
}

// TestBatcherDeadLettered: a dead-lettered mark is queued like a delivered
// one and runs before the claims of its flush, so a claim made after it
// answers DeadLettered; Lookup reads it once flushed.
func TestBatcherDeadLettered(t *testing.T) {
	for name, s := range servers(t) {
		t.Run(name, func(t *testing.T) {
			ctx := t.Context()
			b := ledger.NewBatcher(s.rdb, s.keys, ledger.BatchConfig{FlushInterval: time.Hour})
			defer closeBatcher(t, b)
			const ch, key = "whatsapp", "106"
			a := b.ClaimAsync(ch, key, "m1", "a", false)
			b.Flush()
			if got, _, err := a.Wait(ctx); err != nil || got != ledger.Claimed {
				t.Fatalf("claim: %v, %v", got, err)
			}
			// One flush: the mark, then a claim made after it.
			if err := b.DeadLettered(ctx, ch, key, "m1", "unknown-outcome"); err != nil {
				t.Fatal(err)
			}
			c := b.ClaimAsync(ch, key, "m1", "c", false)
			b.Flush()
			if got, _, err := c.Wait(ctx); err != nil || got != ledger.DeadLettered {
				t.Fatalf("claim after the mark: %v, %v; want dead-lettered", got, err)
			}
			st, err := b.Lookup(ctx, []ledger.Ref{{Channel: ch, Key: key, ID: "m1"}, {Channel: ch, Key: key, ID: "m2"}})
			if err != nil || !slices.Equal(st, []ledger.State{ledger.StateDeadLettered, ledger.StateNone}) {
				t.Fatalf("Lookup = %v, %v; want [dead-lettered none]", st, err)
			}
			if got := entries(t, s.rdb, s.keys)["106\nm1"]; got != "x:unknown-outcome" {
				t.Fatalf("entry = %q, want x:unknown-outcome", got)
			}
		})
	}
}

// TestBatcherCountsRetried: a flush that fails (Redis refuses every
// command) writes neither its marks nor their counts; both go again
// together and are written once, the count added once, not twice. Redis
// refuses until the test lets it answer, at any point of a flush (between
// its MULTI and its EXEC too): a flush half run and sent again adds
// nothing twice.
func TestBatcherCountsRetried(t *testing.T) {
	mr := miniredis.RunT(t)
	rdb := redis.NewClient(&redis.Options{Addr: mr.Addr(), MaxRetries: -1})
	defer rdb.Close()
	var reported atomic.Int64
	keys := bucket.Keys{}
	counter := keys.Campaign("whatsapp", "spring")
	b := ledger.NewBatcher(rdb, keys, ledger.BatchConfig{FlushInterval: time.Millisecond, Count: campaignCounts(rdb, keys),
		OnError: func(error) { reported.Add(1) }})
	defer closeBatcher(t, b)
	mr.SetError("LOADING Redis is loading the dataset in memory")
	b.DeliveredCounted(t.Context(), "whatsapp", "106", "m1", "w", ledger.Count{Name: "spring", Field: "delivered", At: 1_700_000_001_000})
	b.AddCount(ledger.Count{Name: "spring", Field: "dlq:expired"})
	deadline := time.Now().Add(10 * time.Second)
	for reported.Load() < 2 {
		if time.Now().After(deadline) {
			t.Fatal("the failed flush was not reported")
		}
		time.Sleep(time.Millisecond)
	}
	mr.SetError("")
	for entries(t, rdb, keys)["106\nm1"] != "d:w" {
		if time.Now().After(deadline) {
			t.Fatal("the mark was not written once Redis answered")
		}
		time.Sleep(10 * time.Millisecond)
	}
	closeBatcher(t, b)
	got, err := rdb.HMGet(t.Context(), counter, "delivered", "dlq:expired", "first_ms", "last_ms").Result()
	if err != nil {
		t.Fatal(err)
	}
	if want := []any{"1", "1", "1700000001000", "1700000001000"}; !slices.Equal(got, want) {
		t.Errorf("delivered, dlq:expired, first_ms, last_ms = %v; want %v (each count once, with its mark)", got, want)
	}
}

// lostAnswer is a connection whose first call that adds campaign counts
// (in a flush's pipeline, or alone after a NOSCRIPT) reaches Redis, which
// runs all of it, but whose answer is lost: the call fails as one that
// timed out after Redis applied it (a stall longer than the flush's
// timeout).
type lostAnswer struct{ lost atomic.Bool }

var errLost = errors.New("read: i/o timeout (the answer was lost after Redis ran the flush)")

// lose fails cmds, which Redis ran, if they hold the first call that added
// counts.
func (h *lostAnswer) lose(cmds []redis.Cmder) bool {
	counted := slices.ContainsFunc(cmds, func(c redis.Cmder) bool {
		return (c.Name() == "evalsha" || c.Name() == "eval") && c.Err() == nil && slices.ContainsFunc(c.Args(), func(a any) bool {
			k, _ := a.(string)
			return strings.Contains(k, "}:counted:")
		})
	})
	if !counted || !h.lost.CompareAndSwap(false, true) {
		return false
	}
	for _, c := range cmds {
		c.SetErr(errLost)
	}
	return true
}

func (h *lostAnswer) DialHook(next redis.DialHook) redis.DialHook { return next }
func (h *lostAnswer) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		err := next(ctx, cmd)
		if h.lose([]redis.Cmder{cmd}) {
			return errLost
		}
		return err
	}
}
func (h *lostAnswer) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		err := next(ctx, cmds)
		if h.lose(cmds) {
			return errLost
		}
		return err
	}
}

// TestBatcherCountsAnswerLost: a flush whose counts Redis applied but
// whose answer was lost is sent again, its counts under the same token:
// Redis adds them once, so the campaign's counters equal the counts
// queued exactly (not 4,008 of 4,000), on miniredis, redis-server and
// Redis Cluster (the token's key in the counters' slot).
func TestBatcherCountsAnswerLost(t *testing.T) {
	for name, s := range countTargets(t, "tbl") {
		t.Run(name, func(t *testing.T) {
			rdb := ownClient(t, s.rdb)
			var hook lostAnswer
			rdb.AddHook(&hook)
			var reported atomic.Int64
			b := ledger.NewBatcher(rdb, s.keys, ledger.BatchConfig{FlushInterval: time.Millisecond, Count: campaignCounts(rdb, s.keys),
				OnError: func(error) { reported.Add(1) }})
			const n = 200
			for i := range n {
				if err := b.DeliveredCounted(t.Context(), "whatsapp", fmt.Sprint(106+i%7), fmt.Sprint("m", i), "w",
					ledger.Count{Name: "spring", Field: "delivered", At: 1_700_000_000_000 + int64(i)}); err != nil {
					t.Fatal(err)
				}
				if i%10 == 0 {
					b.AddCount(ledger.Count{Name: "spring", Field: "dlq:expired"})
				}
				if i%20 == 0 {
					b.Flush()
				}
			}
			closeBatcher(t, b)
			if !hook.lost.Load() || reported.Load() == 0 {
				t.Fatalf("lost %v, reported %d: no flush of counts lost its answer", hook.lost.Load(), reported.Load())
			}
			st, err := control.New(s.rdb, s.keys).CampaignStatus(t.Context(), "whatsapp", "spring")
			if err != nil {
				t.Fatal(err)
			}
			if st.Delivered != n || !maps.Equal(st.DeadLetters, map[string]int64{"expired": n / 10}) ||
				st.First.UnixMilli() != 1_700_000_000_000 || st.Last.UnixMilli() != 1_700_000_000_000+n-1 {
				t.Errorf("delivered %d, dead letters %v, first %d, last %d; want %d, expired %d, first ...000, last ...%d (each count once)",
					st.Delivered, st.DeadLetters, st.First.UnixMilli(), st.Last.UnixMilli(), n, n/10, n-1)
			}
			l := ledger.New(s.rdb, s.keys, 0)
			for i := range n {
				if ok, err := l.IsDelivered(t.Context(), "whatsapp", fmt.Sprint(106+i%7), fmt.Sprint("m", i)); err != nil || !ok {
					t.Fatalf("m%d delivered = %v, %v; want every mark written", i, ok, err)
				}
			}
		})
	}
}

// IsDelivered through a Batcher reads after every mark queued before it:
// a delivered mark not written yet counts.
func TestBatcherIsDelivered(t *testing.T) {
	mr := miniredis.RunT(t)
	rdb := redis.NewClient(&redis.Options{Addr: mr.Addr()})
	defer rdb.Close()
	b := ledger.NewBatcher(rdb, bucket.NewKeys(""), ledger.BatchConfig{FlushInterval: 50 * time.Millisecond})
	defer b.Close(context.Background())
	ctx := context.Background()
	if err := b.Delivered(ctx, "whatsapp", "106", "m1", "wamid.1"); err != nil {
		t.Fatal(err)
	}
	if d, err := b.IsDelivered(ctx, "whatsapp", "106", "m1", time.Time{}); err != nil || !d {
		t.Fatalf("m1 marked (queued) then read: %v, %v; want true", d, err)
	}
	if d, err := b.IsDelivered(ctx, "whatsapp", "106", "m2", time.Time{}); err != nil || d {
		t.Fatalf("m2 never marked: %v, %v; want false", d, err)
	}
	if _, _, err := b.Claim(ctx, "whatsapp", "106", "m3", "owner", false); err != nil {
		t.Fatal(err)
	}
	if d, err := b.IsDelivered(ctx, "whatsapp", "106", "m3", time.Time{}); err != nil || d {
		t.Fatalf("m3 claimed, not delivered: %v, %v; want false", d, err)
	}
	if d, err := ledger.New(rdb, bucket.NewKeys(""), 0).IsDelivered(ctx, "whatsapp", "106", "m1"); err != nil || !d {
		t.Fatalf("m1 written: %v, %v", d, err)
	}
}

// TestBatcherIsDeliveredBy: a read's flush starts by the time its caller
// gives (at once when that is now), not at the end of the flush interval
// (an hour here), and counts a mark queued before it as any read does; a
// read given no time waits for the interval.
func TestBatcherIsDeliveredBy(t *testing.T) {
	mr := miniredis.RunT(t)
	rdb := redis.NewClient(&redis.Options{Addr: mr.Addr()})
	defer rdb.Close()
	b := ledger.NewBatcher(rdb, bucket.NewKeys(""), ledger.BatchConfig{FlushInterval: time.Hour})
	defer b.Close(context.Background())
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := b.Delivered(ctx, "whatsapp", "106", "m1", "wamid.1"); err != nil {
		t.Fatal(err)
	}
	for id, want := range map[string]bool{"m1": true, "m2": false} {
		if d, err := b.IsDelivered(ctx, "whatsapp", "106", id, time.Now()); err != nil || d != want {
			t.Fatalf("%s read by now with an hour's flush interval: %v, %v; want %v", id, d, err, want)
		}
	}
	start := time.Now()
	if d, err := b.IsDelivered(ctx, "whatsapp", "106", "m1", start.Add(200*time.Millisecond)); err != nil || !d {
		t.Fatalf("m1 read by 200 ms from now: %v, %v; want true", d, err)
	}
	if waited := time.Since(start); waited < 200*time.Millisecond {
		t.Errorf("read by 200 ms from now answered after %v: its flush started before it was due", waited)
	}
	short, cancelShort := context.WithTimeout(ctx, 200*time.Millisecond)
	defer cancelShort()
	if d, err := b.IsDelivered(short, "whatsapp", "106", "m1", time.Time{}); !errors.Is(err, context.DeadlineExceeded) || d {
		t.Errorf("read given no time, within 200 ms of an hour's interval: %v, %v; want it still waiting (deadline exceeded)", d, err)
	}
}

// gateHook holds each flush (a pipeline that starts with EVALSHA, not a
// connection's set-up) until release is closed, once held is set.
type gateHook struct {
	held    atomic.Bool
	entered chan struct{}
	release chan struct{}
}

func (h *gateHook) DialHook(next redis.DialHook) redis.DialHook          { return next }
func (h *gateHook) ProcessHook(next redis.ProcessHook) redis.ProcessHook { return next }
func (h *gateHook) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		if h.held.Load() && len(cmds) > 0 && cmds[0].Name() == "evalsha" {
			h.entered <- struct{}{}
			<-h.release
		}
		return next(ctx, cmds)
	}
}

// TestBatcherAfterWritten: a waiter runs at once when nothing waits, and
// otherwise only once the marks queued before it are in Redis: not while
// Redis fails, not while the flush that holds them is on its way, and in
// the order given. Written waits the same way, or for its context.
func TestBatcherAfterWritten(t *testing.T) {
	mr := miniredis.RunT(t)
	rdb := redis.NewClient(&redis.Options{Addr: mr.Addr(), MaxRetries: -1})
	defer rdb.Close()
	gate := &gateHook{entered: make(chan struct{}), release: make(chan struct{})}
	rdb.AddHook(gate)
	var reported atomic.Int64
	b := ledger.NewBatcher(rdb, bucket.Keys{}, ledger.BatchConfig{FlushInterval: time.Millisecond,
		OnError: func(error) { reported.Add(1) }})
	defer closeBatcher(t, b)

	now := false
	b.AfterWritten(func() { now = true })
	if !now {
		t.Fatal("with nothing queued, the waiter did not run at once")
	}

	// Redis fails: the mark waits, and so does its waiter.
	mr.SetError("LOADING Redis is loading the dataset in memory")
	b.Delivered(t.Context(), "whatsapp", "106", "m1", "w")
	var mu sync.Mutex
	var order []string
	seen := map[string]string{}
	waiter := func(name string) func() {
		return func() {
			mu.Lock()
			defer mu.Unlock()
			order = append(order, name)
			seen[name] = entries(t, rdb, bucket.Keys{})["106\nm1"]
		}
	}
	b.AfterWritten(waiter("first"))
	b.AfterWritten(waiter("second"))
	deadline := time.Now().Add(10 * time.Second)
	for reported.Load() < 2 && time.Now().Before(deadline) {
		time.Sleep(time.Millisecond)
	}
	if reported.Load() < 2 {
		t.Fatal("two failed flushes were not reported")
	}
	short, cancel := context.WithTimeout(t.Context(), 50*time.Millisecond)
	defer cancel()
	if err := b.Written(short); err != context.DeadlineExceeded {
		t.Errorf("Written while Redis fails = %v, want the context's deadline", err)
	}
	mu.Lock()
	if len(order) != 0 {
		t.Errorf("waiters ran while their mark was not written: %v", order)
	}
	mu.Unlock()

	// The next flush is held on its way, then Redis answers: a waiter given
	// now, with nothing more queued, waits for that flush too.
	gate.held.Store(true)
	select {
	case <-gate.entered:
	case <-time.After(10 * time.Second):
		t.Fatal("no flush was tried again within 10 s")
	}
	mr.SetError("")
	b.AfterWritten(waiter("during"))
	mu.Lock()
	if len(order) != 0 {
		t.Errorf("waiters ran while the flush of their mark was on its way: %v", order)
	}
	mu.Unlock()
	gate.held.Store(false)
	close(gate.release)
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	if err := b.Written(ctx); err != nil {
		t.Fatalf("Written once Redis answers: %v", err)
	}
	mu.Lock()
	defer mu.Unlock()
	if want := []string{"first", "second", "during"}; !slices.Equal(order, want) {
		t.Errorf("waiters ran %v, want %v", order, want)
	}
	for name, v := range seen {
		if v != "d:w" {
			t.Errorf("waiter %s saw the mark %q, want it written (d:w)", name, v)
		}
	}
}

// countTarget is a Redis to write campaign counts to, with its keys.
type countTarget struct {
	rdb  redis.UniversalClient
	keys bucket.Keys
}

// countTargets returns the servers of [servers] and Redis Cluster (keys
// under prefix and the time), by name.
func countTargets(t *testing.T, prefix string) map[string]countTarget {
	targets := map[string]countTarget{}
	for name, s := range servers(t) {
		targets[name] = countTarget{s.rdb, s.keys}
	}
	cl := redis.NewClusterClient(&redis.ClusterOptions{Addrs: testenv.ClusterAddrs(t)})
	t.Cleanup(func() { cl.Close() })
	targets["cluster"] = countTarget{cl, bucket.NewKeys(prefix + time.Now().Format("150405.000000"))}
	return targets
}

// ownClient returns a client of its own (a process's own connections) to
// the server or cluster rdb talks to, closed when t ends.
func ownClient(t *testing.T, rdb redis.UniversalClient) redis.UniversalClient {
	var own redis.UniversalClient
	switch c := rdb.(type) {
	case *redis.Client:
		own = redis.NewClient(&redis.Options{Addr: c.Options().Addr, DB: c.Options().DB})
	case *redis.ClusterClient:
		own = redis.NewClusterClient(&redis.ClusterOptions{Addrs: testenv.ClusterAddrs(t)})
	}
	t.Cleanup(func() { own.Close() })
	return own
}
