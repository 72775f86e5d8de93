package ledger_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/pacerhq/pacer/bucket"
	"github.com/pacerhq/pacer/internal/testenv"
	"github.com/pacerhq/pacer/pacer/ledger"
	"github.com/redis/go-redis/v9"
)

func ledgers(t *testing.T) map[string]*ledger.Ledger {
	mr := miniredis.RunT(t)
	real := redis.NewClient(&redis.Options{Addr: testenv.RedisAddr(t), DB: testenv.RedisDB})
	t.Cleanup(func() { real.Close() })
	cluster := redis.NewClusterClient(&redis.ClusterOptions{Addrs: testenv.ClusterAddrs(t)})
	t.Cleanup(func() { cluster.Close() })
	return map[string]*ledger.Ledger{
		"miniredis":    ledger.New(redis.NewClient(&redis.Options{Addr: mr.Addr()}), bucket.NewKeys("t"+t.Name()), 0),
		"redis-server": ledger.New(real, bucket.NewKeys("t"+t.Name()+time.Now().Format("150405.000000")), 0),
		// Under Redis Cluster the hashes are the pacing key's.
		"redis-cluster": ledger.New(cluster, bucket.NewKeys("tc"+t.Name()+time.Now().Format("150405.000000")), 0),
	}
}

func TestLedgerSteps(t *testing.T) {
	for name, l := range ledgers(t) {
		t.Run(name, func(t *testing.T) { checkSteps(t, l) })
	}
}

// stepper is what checkSteps drives: *ledger.Ledger and *ledger.Batcher.
type stepper interface {
	Claim(ctx context.Context, channel, key, id, owner string, force bool) (ledger.ClaimResult, time.Duration, error)
	Delivered(ctx context.Context, channel, key, id, providerID string) error
	Release(ctx context.Context, channel, key, id, owner string) error
}

// step runs op (claim, force, deliver, release) by owner on message id of
// key; only a claim answers a ClaimResult.
func step(ctx context.Context, l stepper, ch, key, id, op, owner string) (got ledger.ClaimResult, err error) {
	switch op {
	case "claim", "force":
		got, _, err = l.Claim(ctx, ch, key, id, owner, op == "force")
	case "deliver":
		err = l.Delivered(ctx, ch, key, id, "wamid.X")
	case "release":
		err = l.Release(ctx, ch, key, id, owner)
	default:
		err = fmt.Errorf("unknown step %q", op)
	}
	return got, err
}

// checkSteps walks one message through claims by several owners, releases,
// an operator's forced resend and its delivery, checking each answer.
func checkSteps(t *testing.T, l stepper) {
	t.Helper()
	ctx := context.Background()
	const ch, key, id = "whatsapp", "106", "m1"
	for i, s := range []struct {
		op    string // claim, force, deliver, release
		owner string
		want  ledger.ClaimResult
	}{
		{"claim", "a", ledger.Claimed},
		{"claim", "a", ledger.Claimed},        // the same owner again
		{"claim", "b", ledger.Abandoned},      // a crashed owner's claim
		{"release", "b", ledger.ClaimUnknown}, // not b's: nothing happens
		{"claim", "b", ledger.Abandoned},
		{"release", "a", ledger.ClaimUnknown}, // the provider refused: a lets go
		{"claim", "b", ledger.Claimed},        // a retry by another owner
		{"force", "c", ledger.Claimed},        // the operator chose to resend
		{"deliver", "c", ledger.ClaimUnknown},
		{"claim", "a", ledger.Delivered},
		{"force", "a", ledger.Delivered}, // delivered is final
		{"release", "c", ledger.ClaimUnknown},
		{"claim", "c", ledger.Delivered},
	} {
		got, err := step(ctx, l, ch, key, id, s.op, s.owner)
		if err != nil || got != s.want {
			t.Fatalf("step %d %s(%s): got %v, %v; want %v", i, s.op, s.owner, got, err, s.want)
		}
	}
}

// TestLedgerClaimHonoursCooldown: no claim while the pacing key cools down,
// so a sender woken from a reservation does not send into a cooldown.
func TestLedgerClaimHonoursCooldown(t *testing.T) {
	mr := miniredis.RunT(t)
	for name, rdb := range map[string]*redis.Client{
		"miniredis":    redis.NewClient(&redis.Options{Addr: mr.Addr()}),
		"redis-server": redis.NewClient(&redis.Options{Addr: testenv.RedisAddr(t), DB: testenv.RedisDB}),
	} {
		t.Run(name, func(t *testing.T) {
			defer rdb.Close()
			ctx := context.Background()
			lim := bucket.New(rdb, bucket.Config{Prefix: "tcd" + time.Now().Format("150405.000000")})
			l := ledger.New(rdb, lim.Keys(), 0)
			if err := lim.Cooldown(ctx, "whatsapp", "106", 2*time.Second); err != nil {
				t.Fatal(err)
			}
			got, left, err := l.Claim(ctx, "whatsapp", "106", "m1", "a", false)
			if err != nil || got != ledger.CoolingDown || left <= time.Second || left > 2*time.Second {
				t.Fatalf("Claim in cooldown = %v, %v, %v; want cooldown with 1s < left <= 2s", got, left, err)
			}
			if got, _, err := l.Claim(ctx, "whatsapp", "106", "m1", "b", false); err != nil || got != ledger.CoolingDown {
				t.Fatalf("second Claim = %v, %v; want cooldown (nothing was claimed)", got, err)
			}
			if got, _, err := l.Claim(ctx, "whatsapp", "107", "m1", "a", false); err != nil || got != ledger.Claimed {
				t.Fatalf("Claim on another key = %v, %v; want claimed", got, err)
			}
		})
	}
}

// TestClaimErrorIsNeverClaimed: an error answers ClaimUnknown, and the zero
// ClaimResult is not Claimed, so a caller that checks the result before
// the error (or not at all) does not send.
func TestClaimErrorIsNeverClaimed(t *testing.T) {
	var zero ledger.ClaimResult
	if zero == ledger.Claimed || zero.String() != "unknown" {
		t.Fatalf("zero ClaimResult = %v, want unknown and not Claimed", zero)
	}
	mr := miniredis.RunT(t)
	rdb := redis.NewClient(&redis.Options{Addr: mr.Addr()})
	defer rdb.Close()
	l := ledger.New(rdb, bucket.Keys{}, 0)
	for _, c := range []struct {
		name    string
		breakIt func()
	}{
		{"redis error", func() { mr.SetError("LOADING Redis is loading the dataset in memory") }},
		{"unreachable", mr.Close},
	} {
		c.breakIt()
		got, left, err := l.Claim(t.Context(), "whatsapp", "106", "m1", "a", false)
		if err == nil || got == ledger.Claimed || got != ledger.ClaimUnknown || left != 0 {
			t.Fatalf("%s: Claim = %v, %v, %v; want unknown, 0 and an error", c.name, got, left, err)
		}
	}
}

// TestIsDelivered: an id is delivered only once Delivered recorded it; a
// claim alone is not.
func TestIsDelivered(t *testing.T) {
	for name, l := range ledgers(t) {
		t.Run(name, func(t *testing.T) {
			ctx := context.Background()
			const ch, key, id = "whatsapp", "106", "m1"
			check := func(step string, want bool) {
				t.Helper()
				got, err := l.IsDelivered(ctx, ch, key, id)
				if err != nil || got != want {
					t.Fatalf("%s: IsDelivered = %v, %v; want %v", step, got, err, want)
				}
			}
			check("unknown id", false)
			if _, _, err := l.Claim(ctx, ch, key, id, "a", false); err != nil {
				t.Fatal(err)
			}
			check("claimed", false)
			if err := l.Delivered(ctx, ch, key, id, "wamid.X"); err != nil {
				t.Fatal(err)
			}
			check("delivered", true)
		})
	}
}

// currentGeneration returns the number of the generation (gen ms long)
// now; a test that starts in a generation's last 5 s waits for the next,
// so its writes share one.
func currentGeneration(gen int64) int64 {
	if left := gen - time.Now().UnixMilli()%gen; left < 5000 {
		time.Sleep(time.Duration(left+10) * time.Millisecond)
	}
	return time.Now().UnixMilli() / gen
}

// planted is an entry written by hand d generations from the current one.
type planted struct {
	d        int64
	field, v string
}

// plantGenerations returns a ledger of ttl on rdb and keys and the current
// generation (TTL/4, not about to end), with entries planted in the
// generations of "whatsapp" they name, as a process that wrote them minutes
// ago would have left them.
func plantGenerations(t *testing.T, rdb redis.UniversalClient, keys bucket.Keys, ttl time.Duration, entries []planted) (*ledger.Ledger, int64) {
	t.Helper()
	g := currentGeneration(int64(ttl / 4 / time.Millisecond))
	for _, p := range entries {
		if err := rdb.HSet(t.Context(), keys.ChannelIDs("whatsapp", g+p.d), p.field, p.v).Err(); err != nil {
			t.Fatal(err)
		}
	}
	return ledger.New(rdb, keys, ttl), g
}

// TestLedgerGenerations: ids live in one hash per generation (TTL/4); an
// entry is read from the current generation and the 4 before it (so it is
// seen for the TTL), and the current hash expires when the fourth
// generation after it ends (so nothing outlives 1.25 x the TTL). Entries
// are planted in older generations by hand, as a process that wrote them
// minutes ago would have left them.
func TestLedgerGenerations(t *testing.T) {
	const ttl = time.Hour
	gen := int64(ttl / 4 / time.Millisecond)
	for name, s := range servers(t) {
		t.Run(name, func(t *testing.T) {
			ctx := t.Context()
			const ch = "whatsapp"
			l, g := plantGenerations(t, s.rdb, s.keys, ttl, []planted{
				{-4, "106\nold", "d:x"},      // 4 generations back: within the TTL
				{-5, "106\ngone", "d:x"},     // 5 back: past it
				{-3, "106\nheld", "c:a"},     // a's claim
				{-2, "106\ntaken", "c:dead"}, // a dead process's claim
				{-1, "106\nboth", "d:w"},     // delivered, then claimed again by z
				{0, "106\nboth", "c:z"},
			})
			hkey := func(d int64) string { return s.keys.ChannelIDs(ch, g+d) }
			for i, c := range []struct {
				op, id, owner string
				want          ledger.ClaimResult
			}{
				{"delivered?", "old", "", ledger.Delivered},
				{"delivered?", "gone", "", ledger.ClaimUnknown},
				{"claim", "gone", "b", ledger.Claimed}, // past the TTL: free again
				{"claim", "old", "b", ledger.Delivered},
				{"claim", "held", "a", ledger.Claimed}, // a's own: nothing written
				{"claim", "held", "b", ledger.Abandoned},
				{"release", "held", "b", ledger.ClaimUnknown}, // not b's: kept
				{"claim", "held", "b", ledger.Abandoned},
				{"force", "both", "b", ledger.Delivered}, // delivered in any generation is final
				{"force", "taken", "b", ledger.Claimed},  // takes over the dead claim
				{"release", "taken", "b", ledger.ClaimUnknown},
				{"claim", "taken", "c", ledger.Claimed}, // the dead claim does not come back
				{"release", "held", "a", ledger.ClaimUnknown},
				{"claim", "held", "b", ledger.Claimed},
				{"claim", "new", "a", ledger.Claimed},
			} {
				var got ledger.ClaimResult
				var err error
				switch c.op {
				case "delivered?":
					var d bool
					if d, err = l.IsDelivered(ctx, ch, "106", c.id); d {
						got = ledger.Delivered
					}
				case "claim", "force":
					got, _, err = l.Claim(ctx, ch, "106", c.id, c.owner, c.op == "force")
				case "release":
					err = l.Release(ctx, ch, "106", c.id, c.owner)
				}
				if err != nil || got != c.want {
					t.Fatalf("step %d %s %s (%s): %v, %v; want %v", i, c.op, c.id, c.owner, got, err, c.want)
				}
			}
			// Where each entry is now: new claims in the current generation,
			// the dead claim and the released ones gone from theirs.
			for _, w := range []struct {
				d        int64
				field, v string
			}{
				{0, "106\ngone", "c:b"}, {0, "106\ntaken", "c:c"}, {0, "106\nheld", "c:b"}, {0, "106\nnew", "c:a"},
				{0, "106\nboth", "c:z"}, {-1, "106\nboth", "d:w"}, {-4, "106\nold", "d:x"},
				{-2, "106\ntaken", ""}, {-3, "106\nheld", ""},
			} {
				v, err := s.rdb.HGet(ctx, hkey(w.d), w.field).Result()
				if errors.Is(err, redis.Nil) {
					v, err = "", nil
				}
				if err != nil || v != w.v {
					t.Errorf("generation %+d, %q = %q, %v; want %q", w.d, w.field, v, err, w.v)
				}
			}
			// The current hash expires when generation g+4 ends: more than
			// the TTL from now, at most 1.25 x the TTL.
			at := time.UnixMilli((g + 5) * gen)
			left, err := s.rdb.PTTL(ctx, hkey(0)).Result()
			if err != nil || left <= ttl-time.Minute || left > ttl*5/4 || left > time.Until(at)+time.Minute || left < time.Until(at)-time.Minute {
				t.Errorf("current generation's PTTL = %v, %v; want about %v (the end of generation g+4), in (TTL, 1.25 TTL]", left, err, time.Until(at).Round(time.Second))
			}
		})
	}
}

// TestLedgerClockSkew: the generation is Redis TIME's; a process whose
// clock is off it by more than a generation (TTL/4) gets an error, never a
// claim in the wrong generation's hash, and one off by less works.
func TestLedgerClockSkew(t *testing.T) {
	mr := miniredis.RunT(t)
	rdb := redis.NewClient(&redis.Options{Addr: mr.Addr()})
	defer rdb.Close()
	const ttl = 4 * time.Minute // generations of 1 minute
	l := ledger.New(rdb, bucket.Keys{}, ttl)
	for _, c := range []struct {
		off  time.Duration // Redis TIME minus the process's clock
		want ledger.ClaimResult
	}{
		{-30 * time.Second, ledger.Claimed},
		{30 * time.Second, ledger.Claimed},
		{-3 * time.Minute, ledger.ClaimUnknown},
		{3 * time.Minute, ledger.ClaimUnknown},
	} {
		mr.SetTime(time.Now().Add(c.off))
		id := fmt.Sprint("m", c.off)
		got, _, err := l.Claim(t.Context(), "whatsapp", "106", id, "a", false)
		if got != c.want || (c.want == ledger.ClaimUnknown) != (err != nil) {
			t.Errorf("Redis %v off: claim = %v, %v; want %v", c.off, got, err, c.want)
		}
		if err != nil && !strings.Contains(err.Error(), "clock") {
			t.Errorf("Redis %v off: error %q does not name the clock", c.off, err)
		}
	}
}

// TestLedgerDeadLettered: an id dead-lettered while claimed (a dead
// owner's claim, an unknown outcome) answers DeadLettered to a claim, for
// good, whoever asks; a forced claim (a replayed record) takes it over,
// and its own outcome counts from then on. Lookup reads each state.
func TestLedgerDeadLettered(t *testing.T) {
	for name, l := range ledgers(t) {
		t.Run(name, func(t *testing.T) {
			ctx := context.Background()
			const ch, key, id = "whatsapp", "106", "m1"
			for i, s := range []struct {
				op    string // claim, force, deliver, release, dead, read
				owner string
				want  any // ledger.ClaimResult for claims, ledger.State for reads
			}{
				{"read", "", ledger.StateNone},
				{"claim", "a", ledger.Claimed},
				{"read", "", ledger.StateClaimed},
				{"claim", "b", ledger.Abandoned}, // a died mid-send
				{"dead", "b", nil},               // b wrote the DLQ copy
				{"read", "", ledger.StateDeadLettered},
				{"claim", "c", ledger.DeadLettered}, // read again after b died too
				{"claim", "a", ledger.DeadLettered}, // even the old owner
				{"release", "a", nil},               // not a claim any more: kept
				{"claim", "c", ledger.DeadLettered},
				{"force", "d", ledger.Claimed}, // replayed: taken over
				{"read", "", ledger.StateClaimed},
				{"claim", "e", ledger.Abandoned}, // d's claim now
				{"dead", "d", nil},               // d's send had no answer
				{"claim", "e", ledger.DeadLettered},
				{"force", "f", ledger.Claimed},
				{"deliver", "f", nil},
				{"claim", "g", ledger.Delivered},
				{"dead", "g", nil}, // delivered stays final
				{"claim", "g", ledger.Delivered},
				{"force", "g", ledger.Delivered},
				{"read", "", ledger.StateDelivered},
			} {
				var got any
				var err error
				switch s.op {
				case "claim", "force":
					got, err = step(ctx, l, ch, key, id, s.op, s.owner)
				case "deliver", "release":
					_, err = step(ctx, l, ch, key, id, s.op, s.owner)
				case "dead":
					err = l.DeadLettered(ctx, ch, key, id, "unknown-outcome")
				case "read":
					var st []ledger.State
					st, err = l.Lookup(ctx, []ledger.Ref{{Channel: ch, Key: key, ID: id}})
					if err == nil {
						got = st[0]
					}
				}
				if err != nil || got != s.want {
					t.Fatalf("step %d %s(%s): got %v, %v; want %v", i, s.op, s.owner, got, err, s.want)
				}
			}
		})
	}
}

// TestLedgerLookup: one Lookup reads ids of several pacing keys in any
// state, in the order asked, an id of one key not seen under another.
func TestLedgerLookup(t *testing.T) {
	for name, l := range ledgers(t) {
		t.Run(name, func(t *testing.T) {
			ctx := context.Background()
			const ch = "whatsapp"
			var refs []ledger.Ref
			var want []ledger.State
			for i := range 30 {
				key, id := fmt.Sprint(100+i%3), fmt.Sprint("m", i)
				refs = append(refs, ledger.Ref{Channel: ch, Key: key, ID: id})
				switch i % 4 {
				case 0:
					want = append(want, ledger.StateNone)
					continue
				case 1:
					want = append(want, ledger.StateClaimed)
				case 2:
					want = append(want, ledger.StateDelivered)
				case 3:
					want = append(want, ledger.StateDeadLettered)
				}
				if _, _, err := l.Claim(ctx, ch, key, id, "a", false); err != nil {
					t.Fatal(err)
				}
				var err error
				switch i % 4 {
				case 2:
					err = l.Delivered(ctx, ch, key, id, "w")
				case 3:
					err = l.DeadLettered(ctx, ch, key, id, "unknown-outcome")
				}
				if err != nil {
					t.Fatal(err)
				}
			}
			refs = append(refs, ledger.Ref{Channel: ch, Key: "999", ID: "m2"}) // m2 is 102's
			want = append(want, ledger.StateNone)
			got, err := l.Lookup(ctx, refs)
			if err != nil || !slices.Equal(got, want) {
				t.Fatalf("Lookup = %v, %v; want %v", got, err, want)
			}
		})
	}
}

// TestLedgerDeadLetteredGenerations: across generations the newest claim
// or dead-lettered mark decides, and a delivered mark anywhere wins.
func TestLedgerDeadLetteredGenerations(t *testing.T) {
	const ttl = time.Hour
	for name, s := range servers(t) {
		t.Run(name, func(t *testing.T) {
			ctx := t.Context()
			const ch = "whatsapp"
			l, _ := plantGenerations(t, s.rdb, s.keys, ttl, []planted{
				{-3, "106\nretaken", "x:unknown-outcome"}, // dead-lettered, then taken over by a replay
				{-1, "106\nretaken", "c:replay"},
				{-3, "106\nlater", "c:dead"}, // claimed, dead-lettered later
				{-2, "106\nlater", "x:unknown-outcome"},
				{-4, "106\nsent", "d:w"}, // delivered, an older-looking mark after
				{-1, "106\nsent", "x:unknown-outcome"},
			})
			for _, c := range []struct {
				id   string
				want ledger.ClaimResult
			}{
				{"retaken", ledger.Abandoned}, {"later", ledger.DeadLettered}, {"sent", ledger.Delivered},
			} {
				if got, _, err := l.Claim(ctx, ch, "106", c.id, "b", false); err != nil || got != c.want {
					t.Errorf("claim %s = %v, %v; want %v", c.id, got, err, c.want)
				}
			}
		})
	}
}

// BenchmarkLedgerLookup: one poll's backlog read, 10,000 ids of 100 pacing
// keys (half of them delivered) on redis-server, per Lookup.
func BenchmarkLedgerLookup(b *testing.B) {
	rdb := redis.NewClient(&redis.Options{Addr: testenv.RedisAddr(b), DB: testenv.RedisDB})
	defer rdb.Close()
	l := ledger.New(rdb, bucket.NewKeys("tbl"+time.Now().Format("150405.000000")), 0)
	refs := make([]ledger.Ref, 10_000)
	for i := range refs {
		refs[i] = ledger.Ref{Channel: "whatsapp", Key: fmt.Sprint(100 + i%100), ID: fmt.Sprint("m", i)}
		if i%2 == 0 {
			if err := l.Delivered(b.Context(), "whatsapp", refs[i].Key, refs[i].ID, "w"); err != nil {
				b.Fatal(err)
			}
		}
	}
	b.ResetTimer()
	for b.Loop() {
		st, err := l.Lookup(b.Context(), refs)
		if err != nil || st[0] != ledger.StateDelivered || st[1] != ledger.StateNone {
			b.Fatalf("Lookup: %v, %v", st[:2], err)
		}
	}
}

// wantOffsets fails t, naming what, unless read (Horizons,
// TakeStopHorizons) of ps on channel gives want, as fmt.Sprint prints it.
func wantOffsets(t *testing.T, what string, read func(context.Context, string, []ledger.Partition) ([]int64, error),
	channel string, ps []ledger.Partition, want string) {
	t.Helper()
	if offs, err := read(t.Context(), channel, ps); err != nil || fmt.Sprint(offs) != want {
		t.Fatalf("%s: %v, %v; want %s", what, offs, err, want)
	}
}

// Horizons reads what SetHorizons wrote, -1 where nothing was, on a single
// server and under Redis Cluster; a value that is not an offset is an
// error naming the partition, every value then -1.
func TestHorizons(t *testing.T) {
	for name, l := range ledgers(t) {
		t.Run(name, func(t *testing.T) {
			ctx := context.Background()
			ps := []ledger.Partition{{Group: "g", Topic: "t", Partition: 0}, {Group: "g", Topic: "t", Partition: 1}, {Group: "g2", Topic: "t", Partition: 0}}
			wantOffsets(t, "before any", l.Horizons, "whatsapp", ps, "[-1 -1 -1]")
			if err := l.SetHorizons(ctx, "whatsapp", ps[:2], []int64{4097, 12}); err != nil {
				t.Fatal(err)
			}
			wantOffsets(t, "after SetHorizons", l.Horizons, "whatsapp", ps, "[4097 12 -1]")
			wantOffsets(t, "another channel's", l.Horizons, "sms", ps, "[-1 -1 -1]")
			if err := l.SetHorizons(ctx, "whatsapp", ps, []int64{1}); err == nil {
				t.Fatal("3 partitions, 1 horizon: no error")
			}
		})
	}
	t.Run("corrupt", func(t *testing.T) {
		mr := miniredis.RunT(t)
		l := ledger.New(redis.NewClient(&redis.Options{Addr: mr.Addr()}), bucket.NewKeys(""), 0)
		mr.Set(bucket.NewKeys("").Horizon("whatsapp", "g", "t", 3), "lots")
		offs, err := l.Horizons(context.Background(), "whatsapp", []ledger.Partition{{Group: "g", Topic: "t", Partition: 2}, {Group: "g", Topic: "t", Partition: 3}})
		if err == nil || !strings.Contains(err.Error(), "t/3") || fmt.Sprint(offs) != "[-1 -1]" {
			t.Fatalf("corrupt horizon: %v, %v; want an error naming t/3 and [-1 -1]", offs, err)
		}
	})
}

// TakeStopHorizons reads what SetStopHorizons wrote and removes it, so a
// second take finds none (-1), on a single server and under Redis Cluster;
// the stop horizons are apart from the horizons.
func TestStopHorizons(t *testing.T) {
	for name, l := range ledgers(t) {
		t.Run(name, func(t *testing.T) {
			ctx := context.Background()
			ps := []ledger.Partition{{Group: "g", Topic: "s", Partition: 0}, {Group: "g", Topic: "s", Partition: 1}, {Group: "g", Topic: "s", Partition: 2}}
			if err := l.SetStopHorizons(ctx, "whatsapp", ps[:2], []int64{40, 7}); err != nil {
				t.Fatal(err)
			}
			wantOffsets(t, "horizons after SetStopHorizons", l.Horizons, "whatsapp", ps, "[-1 -1 -1]")
			wantOffsets(t, "first take", l.TakeStopHorizons, "whatsapp", ps, "[40 7 -1]")
			wantOffsets(t, "second take", l.TakeStopHorizons, "whatsapp", ps, "[-1 -1 -1]")
			if err := l.SetStopHorizons(ctx, "whatsapp", ps, []int64{1}); err == nil {
				t.Fatal("3 partitions, 1 stop horizon: no error")
			}
		})
	}
}

// A ClaimResult and a State print their names, and a value out of range
// its kind and number.
func TestNames(t *testing.T) {
	for _, c := range []struct {
		got  fmt.Stringer
		want string
	}{
		{ledger.ClaimUnknown, "unknown"}, {ledger.CoolingDown, "cooldown"}, {ledger.DeadLettered, "dead-lettered"},
		{ledger.Suppressed, "suppressed"}, {ledger.PairLimited, "pair-limited"}, {ledger.ClaimResult(8), "claim(8)"}, {ledger.ClaimResult(-1), "claim(-1)"},
		{ledger.StateNone, "none"}, {ledger.StateDeadLettered, "dead-lettered"}, {ledger.State(5), "state(5)"},
	} {
		if got := c.got.String(); got != c.want {
			t.Errorf("%#v prints %q, want %q", c.got, got, c.want)
		}
	}
}
