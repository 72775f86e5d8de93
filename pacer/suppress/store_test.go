package suppress_test

import (
	"context"
	"fmt"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/pacerhq/pacer/bucket"
	"github.com/pacerhq/pacer/internal/testenv"
	"github.com/pacerhq/pacer/pacer/suppress"
	"github.com/redis/go-redis/v9"
)

func TestMain(m *testing.M) { os.Exit(testenv.Main(m)) }

// backends are miniredis and redis-server, each with keys of its own.
func backends(t *testing.T) map[string]redis.Cmdable {
	mr := miniredis.RunT(t)
	mini := redis.NewClient(&redis.Options{Addr: mr.Addr()})
	real := redis.NewClient(&redis.Options{Addr: testenv.RedisAddr(t), DB: testenv.RedisDB})
	t.Cleanup(func() { mini.Close(); real.Close() })
	return map[string]redis.Cmdable{"miniredis": mini, "redis-server": real}
}

func keysOf(t *testing.T) bucket.Keys {
	return bucket.NewKeys("ts" + t.Name() + time.Now().Format("150405.000000"))
}

// TestAddListRemove: entries added are listed with their reason, expiry
// and provider time; one added again replaces the first; removed ones are
// gone; another key's are apart; no key or field holds the recipient.
func TestAddListRemove(t *testing.T) {
	for name, rdb := range backends(t) {
		t.Run(name, func(t *testing.T) {
			ctx := context.Background()
			keys := keysOf(t)
			st := suppress.NewStore(rdb, keys)
			now := time.Now().Truncate(time.Millisecond)
			at := now.Add(-time.Hour).UTC()
			a, b := suppress.Hash("tok-a"), suppress.Hash("tok-b")
			n, err := st.Add(ctx, "apns", "com.x", suppress.New(a, suppress.Unregistered, at, now), suppress.New(b, suppress.Undeliverable, time.Time{}, now))
			if err != nil || n != 2 {
				t.Fatalf("Add = %d, %v; want 2 new", n, err)
			}
			if n, err := st.Add(ctx, "apns", "com.x", suppress.New(b, suppress.Manual, time.Time{}, now)); err != nil || n != 0 {
				t.Fatalf("Add again = %d, %v; want 0 new (replaced)", n, err)
			}
			got := list(t, st, "apns", "com.x", now)
			want := []suppress.Entry{{Hash: a, Reason: suppress.Unregistered, At: at}, {Hash: b, Reason: suppress.Manual}}
			if !slices.Equal(got, want) {
				t.Fatalf("List = %+v; want %+v", got, want)
			}
			if got := list(t, st, "apns", "com.y", now); len(got) != 0 {
				t.Fatalf("another key lists %+v; want none", got)
			}
			if n, err := st.Remove(ctx, "apns", "com.x", a, suppress.Hash("never")); err != nil || n != 1 {
				t.Fatalf("Remove = %d, %v; want 1", n, err)
			}
			if got := list(t, st, "apns", "com.x", now); len(got) != 1 || got[0].Hash != b {
				t.Fatalf("after Remove List = %+v; want only %s", got, b)
			}
			// Nothing names the token: not a key, not a field, not a value.
			ks, _ := rdb.Keys(ctx, keys.Prefix()+"*").Result()
			for _, k := range ks {
				dump, _ := rdb.HGetAll(ctx, k).Result()
				if s := fmt.Sprint(k, dump); containsAny(s, "tok-a", "tok-b") {
					t.Fatalf("Redis holds a token: %s", s)
				}
			}
		})
	}
}

// TestExpiry: a timed entry is listed until it expires, then not, and the
// next add removes it from Redis (hash and index); an entry made until
// removed replaces a timed one and leaves the index.
func TestExpiry(t *testing.T) {
	mr := miniredis.RunT(t)
	rdb := redis.NewClient(&redis.Options{Addr: mr.Addr()})
	defer rdb.Close()
	ctx := context.Background()
	keys := bucket.NewKeys("")
	st := suppress.NewStore(rdb, keys)
	t0 := time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)
	mr.SetTime(t0)
	a, b, c := suppress.Hash("+1"), suppress.Hash("+2"), suppress.Hash("+3")
	if _, err := st.Add(ctx, "whatsapp", "106", suppress.New(a, suppress.MarketingLimit, time.Time{}, t0),
		suppress.New(b, suppress.Undeliverable, time.Time{}, t0), suppress.New(c, suppress.MarketingLimit, time.Time{}, t0)); err != nil {
		t.Fatal(err)
	}
	if got := list(t, st, "whatsapp", "106", t0.Add(23*time.Hour)); len(got) != 3 {
		t.Fatalf("at 23 h List = %+v; want 3", got)
	}
	// c is made until removed: out of the expiry index.
	if _, err := st.Add(ctx, "whatsapp", "106", suppress.Entry{Hash: c, Reason: suppress.Manual}); err != nil {
		t.Fatal(err)
	}
	later := t0.Add(25 * time.Hour)
	if got := list(t, st, "whatsapp", "106", later); len(got) != 2 || got[0].Hash == a && got[1].Hash == a {
		t.Fatalf("at 25 h List = %+v; want b (7 days) and c (until removed)", got)
	}
	if n, _ := rdb.HLen(ctx, keys.Suppressed("whatsapp", "106")).Result(); n != 3 {
		t.Fatalf("before the next add the hash holds %d; want 3 (a expired, not yet removed)", n)
	}
	mr.SetTime(later)
	if _, err := st.Add(ctx, "whatsapp", "106", suppress.New(suppress.Hash("+4"), suppress.Bounce, time.Time{}, later)); err != nil {
		t.Fatal(err)
	}
	if ok, _ := rdb.HExists(ctx, keys.Suppressed("whatsapp", "106"), a).Result(); ok {
		t.Fatal("the add after a's expiry left a in the hash")
	}
	if z, _ := rdb.ZRange(ctx, keys.SuppressedExpiry("whatsapp", "106"), 0, -1).Result(); !slices.Equal(z, []string{b}) {
		t.Fatalf("expiry index = %v; want only b", z)
	}
}

// TestRegistered: an APNs token registered after its 410 timestamp is no
// longer suppressed; one registered before it stays; other reasons stay.
func TestRegistered(t *testing.T) {
	for name, rdb := range backends(t) {
		t.Run(name, func(t *testing.T) {
			ctx := context.Background()
			st := suppress.NewStore(rdb, keysOf(t))
			now := time.Now()
			ts := now.Add(-time.Hour)
			tok, mail := suppress.Hash("tok"), suppress.Hash("a@example.com")
			if _, err := st.Add(ctx, "apns", "com.x", suppress.New(tok, suppress.Unregistered, ts, now), suppress.New(mail, suppress.Manual, ts, now)); err != nil {
				t.Fatal(err)
			}
			for i, s := range []struct {
				h    string
				at   time.Time
				want bool
			}{
				{tok, ts.Add(-time.Minute), false}, // registered before APNs saw it dead
				{mail, now, false},                 // not unregistered
				{tok, ts.Add(time.Minute), true},
				{tok, now, false}, // gone already
			} {
				if got, err := st.Registered(ctx, "apns", "com.x", s.h, s.at); err != nil || got != s.want {
					t.Fatalf("step %d: Registered = %v, %v; want %v", i, got, err, s.want)
				}
			}
		})
	}
}

// TestAddRefusesBadEntries: an unknown reason or a malformed hash writes
// nothing and names the entry.
func TestAddRefusesBadEntries(t *testing.T) {
	mr := miniredis.RunT(t)
	rdb := redis.NewClient(&redis.Options{Addr: mr.Addr()})
	st := suppress.NewStore(rdb, bucket.NewKeys(""))
	ok := suppress.New(suppress.Hash("x"), suppress.Manual, time.Time{}, time.Now())
	for _, bad := range []suppress.Entry{{Hash: "+1555", Reason: suppress.Manual}, {Hash: suppress.Hash("y"), Reason: "lost"}} {
		if _, err := st.Add(context.Background(), "fcm", "p", ok, bad); err == nil || !containsAny(err.Error(), "entry 2") {
			t.Fatalf("Add(%+v) = %v; want an error naming entry 2", bad, err)
		}
	}
	if n := len(mr.Keys()); n != 0 {
		t.Fatalf("a refused Add wrote %d keys", n)
	}
}

// TestRecipientHash: a recipient is hashed in its canonical spelling (a
// phone number with or without "+", an address in any case, the same
// recipient), "hash:<24 hex>" is taken as it is (in either case), anything
// else after "hash:", or a recipient over MaxRecipient bytes, is refused.
func TestRecipientHash(t *testing.T) {
	h := suppress.Hash("tok")
	phone, mail := suppress.Hash("15551234567"), suppress.Hash("a.b@example.com")
	for in, want := range map[string]string{"tok": h, "hash:" + h: h, "HASH:" + strings.ToUpper(h): h,
		"+15551234567": phone, " 15551234567 ": phone, "A.B@Example.COM": mail, "Tok": suppress.Hash("Tok")} {
		if got, err := suppress.RecipientHash(in); err != nil || got != want {
			t.Errorf("RecipientHash(%q) = %q, %v; want %q", in, got, err, want)
		}
	}
	if suppress.Hash("Tok") == h {
		t.Error("device tokens are case-sensitive, but Tok and tok hash alike")
	}
	for _, bad := range []string{"", "hash:", "hash:" + h[:23], "hash:" + h + "0", "hash:" + "GHIJ0123456789ABCDEF0123", strings.Repeat("x", suppress.MaxRecipient+1)} {
		if _, err := suppress.RecipientHash(bad); err == nil {
			t.Errorf("RecipientHash(%q) answered no error", bad)
		}
	}
}

// TestBytesPerEntry measures what an entry costs on redis-server (MEMORY
// USAGE of the key's hash and expiry index, 100,000 entries) and holds it
// to what docs/architecture.md states: at most 110 bytes for an entry
// until removed (98.5 measured on redis-server 7.0), 250 for one that
// expires (234: its hash field and its expiry index member).
func TestBytesPerEntry(t *testing.T) {
	rdb := redis.NewClient(&redis.Options{Addr: testenv.RedisAddr(t), DB: testenv.RedisDB})
	defer rdb.Close()
	ctx := context.Background()
	keys := keysOf(t)
	st := suppress.NewStore(rdb, keys)
	const n = 100_000
	now := time.Now()
	for _, c := range []struct {
		key    string
		reason suppress.Reason
		max    float64
	}{{"forever", suppress.Unregistered, 110}, {"timed", suppress.Undeliverable, 250}} {
		es := make([]suppress.Entry, n)
		for i := range es {
			es[i] = suppress.New(suppress.Hash(fmt.Sprint("tok", i)), c.reason, now, now)
		}
		if _, err := st.Add(ctx, "fcm", c.key, es...); err != nil {
			t.Fatal(err)
		}
		var total int64
		for _, k := range []string{keys.Suppressed("fcm", c.key), keys.SuppressedExpiry("fcm", c.key)} {
			b, err := rdb.MemoryUsage(ctx, k, 0).Result()
			if err != nil && err != redis.Nil {
				t.Fatal(err)
			}
			total += b
			rdb.Del(ctx, k)
		}
		per := float64(total) / n
		t.Logf("%s (%s): %.1f bytes per entry", c.key, c.reason, per)
		if per > c.max || per < 20 {
			t.Errorf("%s: %.1f bytes per entry; docs/architecture.md states at most %.0f", c.key, per, c.max)
		}
	}
}

func list(t *testing.T, st *suppress.Store, ch, key string, now time.Time) []suppress.Entry {
	t.Helper()
	var got []suppress.Entry
	if err := st.List(context.Background(), ch, key, now, func(e suppress.Entry) error {
		got = append(got, e)
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	slices.SortFunc(got, func(a, b suppress.Entry) int {
		if a.Hash < b.Hash {
			return -1
		}
		return 1
	})
	return got
}

func containsAny(s string, subs ...string) bool {
	for _, x := range subs {
		if len(x) > 0 && len(s) >= len(x) {
			for i := 0; i+len(x) <= len(s); i++ {
				if s[i:i+len(x)] == x {
					return true
				}
			}
		}
	}
	return false
}
