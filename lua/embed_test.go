package lua

import (
	"io/fs"
	"os"
	"slices"
	"strings"
	"testing"
	"testing/fstest"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"

	"github.com/pacerhq/pacer/internal/testenv"
)

func TestMain(m *testing.M) { os.Exit(testenv.Main(m)) }

// scripts lists every exported script: its file, its composed text, and the
// fragments (name.lua) that compose splices into it, nested ones included.
var scripts = []struct {
	file  string
	src   string
	frags []string
}{
	{"state.lua", State, []string{"limit_args", "argv", "refill", "clock"}},
	{"cooldown.lua", Cooldown, []string{"int_arg", "clock"}},
	{"reserve.lua", Reserve, []string{"limit_args", "argv", "refill", "clock"}},
	{"lease_return.lua", LeaseReturn, []string{"limit_args", "argv", "refill", "clock"}},
	{"window.lua", Window, []string{"window_read", "clock"}},
	{"aimd_throttle.lua", AIMDThrottle, []string{"aimd_read", "adapt_base", "argv", "clock"}},
	{"aimd_recover.lua", AIMDRecover, []string{"aimd_read", "adapt_base", "argv", "clock"}},
	{"aimd_state.lua", AIMDState, []string{"aimd_read", "adapt_base", "argv", "clock"}},
	{"aimd_storm.lua", AIMDStorm, []string{"aimd_read", "adapt_base", "argv", "clock"}},
	{"slow_start.lua", SlowStart, []string{"int_arg", "clock"}},
	{"aimd_pair.lua", AIMDPair, []string{"adapt_base", "argv", "clock"}},
	{"aimd_achieved.lua", AIMDAchieved, nil},
	{"aimd_pairs.lua", AIMDPairs, []string{"adapt_base", "argv", "clock"}},
	{"breaker_allow.lua", BreakerAllow, []string{"breaker_read", "adapt_base", "argv", "clock"}},
	{"breaker_result.lua", BreakerResult, []string{"breaker_read", "adapt_base", "argv", "clock"}},
	{"breaker_status.lua", BreakerStatus, []string{"breaker_read", "adapt_base", "argv", "clock"}},
	{"ledger.lua", Ledger, []string{"pair_limit", "int_arg"}},
	{"suppress_add.lua", SuppressAdd, nil},
	{"campaign_count.lua", CampaignCount, []string{"int_arg", "count_args"}},
	{"outcome_count.lua", OutcomeCount, []string{"int_arg", "count_args"}},
	{"campaign_claim.lua", CampaignClaim, []string{"int_arg"}},
	{"portfolio.lua", Portfolio, nil},
	{"quota.lua", Quota, []string{"int_arg", "claim_args", "refill", "window_read", "clock"}},
	{"quota_finish.lua", QuotaFinish, []string{"int_arg", "claim_args"}},
}

// TestContracts checks that every script opens with its contract (style.md
// 2.3): KEYS, ARGV with units, and the reply shape.
func TestContracts(t *testing.T) {
	for _, s := range scripts {
		// The contract is the comment block that opens the file.
		var header []string
		for _, line := range strings.Split(s.src, "\n") {
			if !strings.HasPrefix(line, "--") {
				break
			}
			header = append(header, line)
		}
		h := strings.Join(header, "\n")
		for _, want := range []string{"-- " + s.file + ": ", "-- KEYS[1]", "-- ARGV[1]", "-- Reply:", "-- Writes:"} {
			if !strings.Contains(h, want) {
				t.Errorf("%s: the opening comment block lacks %q", s.file, want)
			}
		}
	}
}

// TestCompose checks the splicing of fragments into the scripts: no
// "-- @include" line is left, each script holds each of its fragments
// exactly once and no other, and every .lua file is a script or a fragment.
func TestCompose(t *testing.T) {
	frags := map[string]string{} // name -> composed text
	known := map[string]bool{}
	for _, s := range scripts {
		known[s.file] = true
		for _, name := range s.frags {
			frags[name] = compose(name + ".lua")
			known[name+".lua"] = true
		}
	}
	for _, s := range scripts {
		for _, line := range strings.Split(s.src, "\n") {
			if strings.HasPrefix(strings.TrimSpace(line), strings.TrimSpace(includeMarker)) {
				t.Errorf("%s: marker left after composing: %q", s.file, line)
			}
		}
		for name, text := range frags {
			want := 0
			if slices.Contains(s.frags, name) {
				want = 1
			}
			if n := strings.Count(s.src, text); n != want {
				t.Errorf("%s holds %s.lua %d times, want %d", s.file, name, n, want)
			}
		}
	}
	all, err := fs.Glob(files, "*.lua")
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range all {
		if !known[f] {
			t.Errorf("%s is neither a script listed in scripts nor a fragment one includes", f)
		}
	}
}

// TestSplice checks compose's handling of nested includes, a missing
// fragment and an include cycle.
func TestSplice(t *testing.T) {
	fsys := fstest.MapFS{
		"s.lua":     {Data: []byte("-- s\n-- @include a\nreturn x\n")},
		"a.lua":     {Data: []byte("local x = 1\n-- @include b\n")},
		"b.lua":     {Data: []byte("x = x + 1\n")},
		"bad.lua":   {Data: []byte("-- @include none\n")},
		"cycle.lua": {Data: []byte("-- @include loop\n")},
		"loop.lua":  {Data: []byte("-- @include cycle\n")},
	}
	if got, want := splice(fsys, "s.lua", nil), "-- s\nlocal x = 1\nx = x + 1\nreturn x\n"; got != want {
		t.Errorf("splice(s.lua) = %q, want %q", got, want)
	}
	for _, file := range []string{"bad.lua", "cycle.lua"} {
		func() {
			defer func() {
				if recover() == nil {
					t.Errorf("splice(%s) did not panic", file)
				}
			}()
			splice(fsys, file, nil)
		}()
	}
}

// TestScriptsLoad checks that every composed script compiles: SCRIPT LOAD
// into miniredis (gopher-lua) and, unless -short, a real redis-server.
func TestScriptsLoad(t *testing.T) {
	servers := map[string]*redis.Client{
		"miniredis": redis.NewClient(&redis.Options{Addr: miniredis.RunT(t).Addr()}),
	}
	if !testing.Short() {
		servers["redis-server"] = redis.NewClient(&redis.Options{Addr: testenv.RedisAddr(t), DB: testenv.RedisDB})
	}
	for name, rdb := range servers {
		t.Cleanup(func() { rdb.Close() })
		for _, s := range scripts {
			sha, err := rdb.ScriptLoad(t.Context(), s.src).Result()
			if err != nil {
				t.Errorf("%s: SCRIPT LOAD %s: %v", name, s.file, err)
				continue
			}
			if want := redis.NewScript(s.src).Hash(); sha != want {
				t.Errorf("%s: SCRIPT LOAD %s = %s, want %s", name, s.file, sha, want)
			}
		}
	}
}

// TestCountArgs: both counts refuse malformed leading arguments with an
// error naming the script and the argument (count_args.lua), writing
// nothing.
func TestCountArgs(t *testing.T) {
	mr := miniredis.RunT(t)
	rdb := redis.NewClient(&redis.Options{Addr: mr.Addr()})
	t.Cleanup(func() { rdb.Close() })
	for _, c := range []struct {
		src, script, ttl string
		keys             []string
	}{
		{CampaignCount, "campaign count", "token_ms", []string{"{c}:token", "{c}:index"}},
		{OutcomeCount, "outcome count", "ttl_ms", []string{"{c}:index"}},
	} {
		for _, a := range []struct {
			argv []any
			want string
		}{
			{[]any{0, 1, 1}, c.ttl + " must be an integer >= 1"},
			{[]any{"x", 1, 1}, c.ttl + " must be an integer >= 1"},
			{[]any{1, 1.5, 1}, "now_ms must be an integer"},
			{[]any{1, 1, 0}, "keep must be an integer >= 1"},
			{[]any{1, 1}, "keep must be an integer >= 1"},
		} {
			err := redis.NewScript(c.src).Run(t.Context(), rdb, c.keys, a.argv...).Err()
			if want := "ERR " + c.script + ": " + a.want; err == nil || err.Error() != want {
				t.Errorf("%s %v: %v, want %q", c.script, a.argv, err, want)
			}
		}
	}
	if keys := mr.Keys(); len(keys) != 0 {
		t.Errorf("keys written: %v", keys)
	}
}

// TestClaimArgs: quota.lua and quota_finish.lua refuse a malformed
// idempotency flag, an empty token and a malformed TTL with an error naming
// the script and the argument (claim_args.lua, int_arg.lua), writing
// nothing.
func TestClaimArgs(t *testing.T) {
	mr := miniredis.RunT(t)
	rdb := redis.NewClient(&redis.Options{Addr: mr.Addr()})
	t.Cleanup(func() { rdb.Close() })
	for _, c := range []struct {
		src  string
		keys []string
		argv []any
		want string
	}{
		// quota.lua: T, N, I, token, claim_ms, then one bucket tier's arguments.
		{Quota, []string{"{q}:b", "{q}:i", "{q}:j"}, []any{1, 0, 2, "tok", 1000}, "ERR quota: ARGV[3] must be 0 or 1"},
		{Quota, []string{"{q}:b"}, []any{1, 0, 0, "", 1000}, "ERR quota: token must not be empty"},
		{Quota, []string{"{q}:b"}, []any{1, 0, 0, "tok", 0}, "ERR quota: claim_ms must be an integer >= 1"},
		{Quota, []string{"{q}:b"}, []any{1, 0, 0, "tok", 1.5}, "ERR quota: claim_ms must be an integer >= 1"},
		// quota_finish.lua: I, token, D, done_ms, stored.
		{QuotaFinish, []string{"{q}:id"}, []any{"x", "tok", 1, 1000, ""}, "ERR quota_finish: ARGV[1] must be 0 or 1"},
		{QuotaFinish, []string{"{q}:id"}, []any{0, "", 1, 1000, ""}, "ERR quota_finish: token must not be empty"},
		{QuotaFinish, []string{"{q}:id"}, []any{0, "tok", 1, 0, ""}, "ERR quota_finish: done_ms must be an integer >= 1"},
		{QuotaFinish, []string{"{q}:id"}, []any{0, "tok", 1}, "ERR quota_finish: done_ms must be an integer >= 1"},
	} {
		err := redis.NewScript(c.src).Run(t.Context(), rdb, c.keys, c.argv...).Err()
		if err == nil || err.Error() != c.want {
			t.Errorf("%v: %v, want %q", c.argv, err, c.want)
		}
	}
	if keys := mr.Keys(); len(keys) != 0 {
		t.Errorf("keys written: %v", keys)
	}
}
