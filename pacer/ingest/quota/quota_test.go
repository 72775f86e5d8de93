package quota_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"testing"
	"testing/synctest"
	"time"

	"github.com/pacerhq/pacer/bucket"
	"github.com/pacerhq/pacer/internal/redistest"
	"github.com/pacerhq/pacer/internal/testenv"
	"github.com/pacerhq/pacer/pacer/ingest/quota"
	"github.com/pacerhq/pacer/pacer/ingest/window"
)

func TestMain(m *testing.M) { os.Exit(testenv.Main(m)) }

const ms = time.Millisecond

// tiers returns an IP bucket (1/s, burst 2, per request), a tenant day
// window (5 messages per day) and a channel bucket (10/s, burst 3 per
// message), keyed under prefix.
func tiers(prefix string) []quota.Tier {
	k := bucket.NewKeys(prefix)
	return []quota.Tier{
		{Name: "ip", Key: k.Ingest("ip", "192.0.2.1"), Unit: quota.PerRequest, Bucket: &bucket.Limit{PerSecond: 1, Burst: 2}},
		{Name: "tenant-day", Key: k.Ingest("tenant-day", "acme"), Unit: quota.PerMessage, Window: &window.Window{Max: 5, Period: 24 * time.Hour}},
		{Name: "channel", Key: k.Ingest("channel", "whatsapp"), Unit: quota.PerMessage, Bucket: &bucket.Limit{PerSecond: 10, Burst: 3}},
	}
}

// bigTier is one tenant bucket (100/s, burst 100) under prefix, roomy
// enough that the tests of id records never meet its limit.
func bigTier(prefix string) []quota.Tier {
	return []quota.Tier{{Name: "tenant", Key: bucket.NewKeys(prefix).Ingest("tenant", "acme"), Bucket: &bucket.Limit{PerSecond: 100, Burst: 100}}}
}

func ids(prefix string, names ...string) []string {
	var out []string
	for _, n := range names {
		out = append(out, bucket.NewKeys(prefix).Ingest("id", "acme:"+n))
	}
	return out
}

// both runs f on Redis (miniredis and redis-server) and on Local.
func both(t *testing.T, f func(t *testing.T, q quota.Quota, prefix string)) {
	redistest.Each(t, func(t *testing.T, e *redistest.Env) { f(t, quota.New(e.RDB), e.Prefix) })
	t.Run("local", func(t *testing.T) { t.Parallel(); f(t, quota.NewLocal(1), "") })
}

// TestRefusalTakesNothing: a request one tier refuses consumes nothing
// from the others, and the tier named is the binding one.
func TestRefusalTakesNothing(t *testing.T) {
	both(t, func(t *testing.T, q quota.Quota, p string) {
		ctx := context.Background()
		take := func(names ...string) quota.Result {
			t.Helper()
			r, err := q.Take(ctx, quota.Request{Tiers: tiers(p), IDs: ids(p, names...), ClaimTTL: time.Minute})
			if err != nil {
				t.Fatal(err)
			}
			return r
		}
		// 3 messages: channel burst 3 used, day 3 of 5, ip 1 of 2.
		r := take("a", "b", "c")
		if !r.Granted || r.Counted != 3 || r.Tiers[0].Remaining != 1 || r.Tiers[1].Remaining != 2 || r.Tiers[2].Remaining != 0 {
			t.Fatalf("first: %+v", r)
		}
		// 2 more: the channel bucket is empty, refused; ip and day untouched.
		r = take("d", "e")
		if r.Granted || r.Refused != 2 || r.Tiers[2].Wait < 150*ms || r.Tiers[2].Wait > 200*ms {
			t.Fatalf("second: want refused by channel with wait ~200ms, got %+v", r)
		}
		if r.Tiers[0].Remaining != 1 || r.Tiers[1].Remaining != 2 {
			t.Fatalf("second: a refusal took from other tiers: %+v", r)
		}
		// The same ids again: none is new, so the message tiers cost 0; only the ip request counts.
		r = take("a", "b", "c")
		if !r.Granted || r.Counted != 0 || r.IDs[0] != quota.IDPending || r.Tiers[0].Remaining != 0 {
			t.Fatalf("retry of claimed ids: %+v", r)
		}
		// The ip bucket is empty now: refused by ip, nothing claimed for "z".
		r = take("z")
		if r.Granted || r.Refused != 0 || r.IDs[0] != quota.IDNew {
			t.Fatalf("ip refusal: %+v", r)
		}
	})
}

// TestFinish: done ids are reported done; released ids can be claimed
// again; an Idempotency-Key record replays what was stored.
func TestFinish(t *testing.T) {
	both(t, func(t *testing.T, q quota.Quota, p string) {
		ctx := context.Background()
		big := bigTier(p)
		ik := bucket.NewKeys(p).Ingest("ikey", "acme:k1")
		r, err := q.Take(ctx, quota.Request{Tiers: big, IDs: ids(p, "a", "b"), IdemKey: ik, ClaimTTL: time.Minute})
		if err != nil || !r.Granted || r.Counted != 2 {
			t.Fatalf("take: %+v %v", r, err)
		}
		again, err := q.Take(ctx, quota.Request{Tiers: big, IDs: ids(p, "a"), IdemKey: ik, ClaimTTL: time.Minute})
		if err != nil || !again.Known || again.Stored != "p:"+r.Token {
			t.Fatalf("in-flight idempotency key: %+v %v", again, err)
		}
		err = q.Finish(ctx, quota.Finish{Token: r.Token, IdemKey: ik, Done: ids(p, "a"), Release: ids(p, "b"), Stored: `{"status":202}`, DoneTTL: time.Hour})
		if err != nil {
			t.Fatal(err)
		}
		again, _ = q.Take(ctx, quota.Request{Tiers: big, IdemKey: ik, ClaimTTL: time.Minute})
		if !again.Known || again.Stored != `{"status":202}` {
			t.Fatalf("replay: %+v", again)
		}
		r2, err := q.Take(ctx, quota.Request{Tiers: big, IDs: ids(p, "a", "b"), ClaimTTL: time.Minute})
		if err != nil || !r2.Granted || r2.Counted != 1 || r2.IDs[0] != quota.IDDone || r2.IDs[1] != quota.IDNew {
			t.Fatalf("after finish: %+v %v", r2, err)
		}
		// A stale release (another token) must not drop r2's claim on b.
		if err := q.Finish(ctx, quota.Finish{Token: r.Token, Release: ids(p, "b"), DoneTTL: time.Hour}); err != nil {
			t.Fatal(err)
		}
		r3, _ := q.Take(ctx, quota.Request{Tiers: big, IDs: ids(p, "b"), ClaimTTL: time.Minute})
		if r3.IDs[0] != quota.IDPending {
			t.Fatalf("a stale release dropped another request's claim: %+v", r3)
		}
	})
}

// TestDayWindowBoundary: the day window admits at most Max per fixed day
// and, at the boundary, only what the previous day's decayed share leaves.
func TestDayWindowBoundary(t *testing.T) {
	t.Parallel()
	e := redistest.Mini(t)
	q := quota.New(e.RDB)
	k := bucket.NewKeys("")
	day := []quota.Tier{{Name: "tenant-day", Key: k.Ingest("tenant-day", "acme"), Unit: quota.PerMessage,
		Window: &window.Window{Max: 1000, Period: 24 * time.Hour}}}
	n := 0
	take := func(count int) bool {
		var names []string
		for range count {
			n++
			names = append(names, string(rune('a'+n%26))+time.Duration(n).String())
		}
		r, err := q.Take(context.Background(), quota.Request{Tiers: day, IDs: ids("", names...), ClaimTTL: time.Minute})
		if err != nil {
			t.Fatal(err)
		}
		return r.Granted
	}
	// All 1000 in the last minute of day 0 (T0 is midnight).
	e.MR.SetTime(redistest.T0.Add(24*time.Hour - time.Minute))
	if !take(1000) || take(1) {
		t.Fatal("day 0: want exactly 1000 admitted")
	}
	// One minute into day 1 the previous day still counts 1000*(1-1/1440),
	// rounded up: 1000 - 0 -> no room beyond ceil's remainder.
	e.MR.SetTime(redistest.T0.Add(24*time.Hour + time.Minute))
	admitted := 0
	for take(1) {
		admitted++
	}
	// 1000 * 1/1440 of a day elapsed: floor(0.69) = 0 messages of room.
	if admitted != 0 {
		t.Fatalf("1 min after the boundary: %d admitted, want 0 (no 2x burst)", admitted)
	}
	// Half a day in: half the previous day's count has slid out.
	e.MR.SetTime(redistest.T0.Add(36 * time.Hour))
	for take(1) {
		admitted++
	}
	if admitted != 500 {
		t.Fatalf("half a day after the boundary: %d admitted, want 500", admitted)
	}
}

// TestDayWindowReset: a day window's Reset is when one unit more than
// what remains fits again, which is the Wait of the next request of one
// message: not the end of the fixed day, since the sliding count falls
// gradually. 1000 accepted an hour into day 0 and 250 six hours into day
// 1 leave the count at 1000; it falls to 999 once 251/1000 of day 1 have
// passed, 86.4 s later (the end of day 1 is 18 h off).
func TestDayWindowReset(t *testing.T) {
	day := func(p string) []quota.Tier {
		return []quota.Tier{{Name: "tenant-day", Key: bucket.NewKeys(p).Ingest("tenant-day", "acme"), Unit: quota.PerMessage,
			Window: &window.Window{Max: 1000, Period: 24 * time.Hour}}}
	}
	// run takes 1000 at 1h, 250 at 30h and then one, with at(d) setting
	// the quota's clock to d after a midnight.
	run := func(t *testing.T, q quota.Quota, p string, at func(time.Duration)) {
		ctx := context.Background()
		n := 0
		take := func(count int) quota.Result {
			t.Helper()
			var names []string
			for range count {
				n++
				names = append(names, fmt.Sprint("r", n))
			}
			r, err := q.Take(ctx, quota.Request{Tiers: day(p), IDs: ids(p, names...), ClaimTTL: time.Minute})
			if err != nil {
				t.Fatal(err)
			}
			return r
		}
		at(time.Hour)
		if r := take(1000); !r.Granted || r.Tiers[0].Reset != 23*time.Hour+86400*ms {
			t.Errorf("day 0, 1000 of 1000: %+v; want granted, reset 23h1m26.4s (the count of 1000 falls to 999 86.4 s into day 1)", r)
		}
		at(30 * time.Hour)
		last := take(250)
		if !last.Granted || last.Tiers[0].Remaining != 0 {
			t.Fatalf("day 1, 250 more: %+v; want granted with 0 remaining", last)
		}
		next := take(1)
		if next.Granted || next.Tiers[0].Wait != 86400*ms {
			t.Fatalf("day 1, one more: %+v; want refused for 86.4 s", next)
		}
		if last.Tiers[0].Reset != next.Tiers[0].Wait {
			t.Errorf("the last grant's reset %v, the next request's wait %v; want them equal", last.Tiers[0].Reset, next.Tiers[0].Wait)
		}
	}
	redistest.Each(t, func(t *testing.T, e *redistest.Env) {
		if e.MR == nil {
			t.Skip("the clock is miniredis's")
		}
		run(t, quota.New(e.RDB), e.Prefix, func(d time.Duration) { e.MR.SetTime(redistest.T0.Add(d)) })
	})
	t.Run("local", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			start := time.Now() // synctest starts at a midnight
			run(t, quota.NewLocal(1), "", func(d time.Duration) { time.Sleep(start.Add(d).Sub(time.Now())) })
		})
	})
}

func TestInvalid(t *testing.T) {
	q := quota.NewLocal(1)
	_, err := q.Take(context.Background(), quota.Request{Tiers: []quota.Tier{{Name: "x", Key: "k"}}, ClaimTTL: time.Second})
	if !errors.Is(err, quota.ErrInvalid) {
		t.Fatalf("want ErrInvalid, got %v", err)
	}
}

// TestManyIDs: the id records of a request of 1,200 ids (read in chunks
// of 500 by the script) are each reported in their own state: done,
// claimed or new, at the chunk edges too.
func TestManyIDs(t *testing.T) {
	both(t, func(t *testing.T, q quota.Quota, p string) {
		ctx := context.Background()
		big := bigTier(p)
		var names []string
		for i := range 1200 {
			names = append(names, fmt.Sprint("m", i))
		}
		all := ids(p, names...)
		done := []string{all[0], all[499], all[1000], all[1199]}
		pending := []string{all[500], all[999], all[1001]}
		r, err := q.Take(ctx, quota.Request{Tiers: big, IDs: append(append([]string{}, done...), pending...), ClaimTTL: time.Minute})
		if err != nil || !r.Granted {
			t.Fatalf("take: %+v %v", r, err)
		}
		if err := q.Finish(ctx, quota.Finish{Token: r.Token, Done: done, DoneTTL: time.Hour}); err != nil {
			t.Fatal(err)
		}
		r, err = q.Take(ctx, quota.Request{Tiers: big, IDs: all, ClaimTTL: time.Minute})
		if err != nil || !r.Granted || r.Counted != 1200-7 {
			t.Fatalf("take of 1200: counted %d, granted %v, err %v; want 1193 new", r.Counted, r.Granted, err)
		}
		want := map[int]quota.IDState{0: quota.IDDone, 499: quota.IDDone, 1000: quota.IDDone, 1199: quota.IDDone,
			500: quota.IDPending, 999: quota.IDPending, 1001: quota.IDPending}
		for i, s := range r.IDs {
			if w, ok := want[i]; (ok && s != w) || (!ok && s != quota.IDNew) {
				t.Errorf("id %d: state %v, want %v", i, s, w)
			}
		}
	})
}
