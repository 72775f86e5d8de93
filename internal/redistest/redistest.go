// Package redistest runs the tests of the packages that run Pacer's Lua
// scripts (bucket, its subpackages, and the ledger, controls and ingest
// quotas under pacer/) against both backends they support: miniredis, whose
// clock the test sets (exact checks), and the shared redis-server, whose
// clock runs (checks within [Slack]).
package redistest

import (
	"context"
	"math"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"

	"github.com/pacerhq/pacer/internal/testenv"
)

// T0 is where miniredis's clock (TIME and TTLs) starts in every test.
var T0 = time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)

// Slack is how far a duration measured on redis-server may be from the
// exact one: the real clock runs on between steps, and between a script and
// the PTTL that reads what it wrote (under -race, on a busy machine).
// Tables that run on redis-server keep every grant and refusal more than
// Slack away from flipping.
const Slack = 200 * time.Millisecond

// Env is one backend for one test: a fresh miniredis, or the shared
// redis-server with a key prefix of the test's own.
type Env struct {
	RDB    *redis.Client
	MR     *miniredis.Miniredis // nil on redis-server
	Prefix string               // key prefix of this test: "" (the default) on miniredis
	start  time.Time            // redis-server: wall time of offset 0, set by Mark
	// redis-server, set by Ran: the first call's round trip (its Redis
	// time, offset 0 in Ran's terms, lies that much before start at most),
	// and the bounds of how late the calls since ran after their offsets.
	trip0, lateLo, lateHi time.Duration
}

// Each runs f in parallel against miniredis (exact, clock set by the test)
// and against a real redis-server (clock running, checks within Slack).
func Each(t *testing.T, f func(t *testing.T, e *Env)) {
	t.Parallel()
	t.Run("miniredis", func(t *testing.T) {
		t.Parallel()
		f(t, Mini(t))
	})
	t.Run("redis-server", func(t *testing.T) {
		t.Parallel()
		f(t, Real(t))
	})
}

// Mini returns an Env on a fresh miniredis, its clock at T0.
func Mini(t testing.TB) *Env {
	mr := miniredis.RunT(t)
	mr.SetTime(T0)
	mr.ClockTTL(true) // SetTime moves TTLs too, as the real clock does
	rdb := redis.NewClient(&redis.Options{Addr: mr.Addr()})
	t.Cleanup(func() { rdb.Close() })
	return &Env{RDB: rdb, MR: mr}
}

// Real returns an Env on the shared redis-server ([testenv.RedisAddr]).
func Real(t testing.TB) *Env {
	rdb := redis.NewClient(&redis.Options{Addr: testenv.RedisAddr(t), DB: testenv.RedisDB})
	t.Cleanup(func() { rdb.Close() })
	// A prefix per test keeps parallel tests and earlier runs apart.
	return &Env{RDB: rdb, Prefix: "test:" + t.Name() + ":" + strconv.FormatInt(time.Now().UnixNano(), 36)}
}

// Exact reports whether the backend's clock is set by the test.
func (e *Env) Exact() bool { return e.MR != nil }

// At moves to offset d from the start of the test: miniredis sets its clock
// (TIME and TTLs), redis-server sleeps until then. On redis-server offset 0
// is the end of the first call (see Mark), so offsets must not decrease and
// the first step must be at 0.
func (e *Env) At(d time.Duration) {
	if e.MR != nil {
		e.MR.SetTime(T0.Add(d))
		return
	}
	if !e.start.IsZero() {
		time.Sleep(time.Until(e.start.Add(d)))
	}
}

// Mark is called after every call to Redis in a table. On redis-server the
// first one fixes offset 0, so a grant expected at offset d always sees at
// least d of refill after the first write.
func (e *Env) Mark() {
	if e.MR == nil && e.start.IsZero() {
		e.start = time.Now()
	}
}

// Ran records call c, made for offset d of a step table, as Mark does, and
// returns on redis-server the bounds of how much later c ran after its
// offset than the calls before it (one of which wrote the state c read)
// ran after theirs: 0, 0 on miniredis and for the first call. A time the
// table expects c to read (a wait, a slot's delay) is that much nearer;
// see [Env.NearShift].
func (e *Env) Ran(d time.Duration, c Call) (lo, hi time.Duration) {
	if e.MR != nil {
		return 0, 0
	}
	if e.start.IsZero() {
		e.start, e.trip0 = c.Answered, c.Trip()
		return 0, 0
	}
	// Offset 0 is the first call's Redis time, between start - trip0 and
	// start; c ran between c.Sent and c.Answered.
	cLo, cHi := c.Sent.Sub(e.start)-d, c.Answered.Sub(e.start)+e.trip0-d
	lo, hi = cLo-e.lateHi, cHi-e.lateLo
	e.lateLo, e.lateHi = min(e.lateLo, cLo), max(e.lateHi, cHi)
	return lo, hi
}

// NearShift reports whether got, a time a call read (a wait, a delay),
// matches want, the table's: exactly on miniredis; on redis-server within
// Slack of want less the lateness bounds lo and hi from [Env.Ran] (a time
// that would be negative reads 0), so that however late the calls ran a
// value that is wrong by more than Slack still fails.
func (e *Env) NearShift(got, want, lo, hi time.Duration) bool {
	if e.Exact() {
		return got == want
	}
	return got >= max(0, want-hi-Slack) && got <= max(0, want-lo)+Slack
}

// Behind reports, on redis-server, how far the wall clock is past offset
// d (0 on miniredis, or before Mark): how late a step meant for d ran.
func (e *Env) Behind(d time.Duration) time.Duration {
	if e.MR != nil || e.start.IsZero() {
		return 0
	}
	return time.Since(e.start) - d
}

// Restart forgets offset 0 on redis-server, for a table run again from its
// first step (on fresh keys); on miniredis it does nothing.
func (e *Env) Restart() {
	if e.MR == nil {
		e.start, e.trip0, e.lateLo, e.lateHi = time.Time{}, 0, 0, 0
	}
}

// Near reports whether a measured duration matches want: exactly on
// miniredis, within Slack on redis-server.
func (e *Env) Near(got, want time.Duration) bool {
	if e.Exact() {
		return got == want
	}
	return got >= want-Slack && got <= want+Slack
}

// Call is a call's bounds on the local clock: Redis ran it, at its TIME,
// between Sent and Answered (redis-server runs on this machine's clock).
type Call struct{ Sent, Answered time.Time }

// Timed runs f, a call to Redis, and returns its bounds.
func Timed(f func()) Call {
	sent := time.Now()
	f()
	return Call{sent, time.Now()}
}

// Trip is how long the call took: how far before Answered Redis may have
// run it.
func (c Call) Trip() time.Duration { return c.Answered.Sub(c.Sent) }

// NearSince reports whether got and want, two times left (of cooldowns,
// TTLs) whose ends were set after since and read after that, match:
// exactly on miniredis; on redis-server within the time passed since
// since, rounded up to the millisecond they count in: however late the
// calls ran, their ends and readings all lie in that time.
func (e *Env) NearSince(got, want time.Duration, since time.Time) bool {
	if e.Exact() {
		return got == want
	}
	d := time.Since(since).Truncate(time.Millisecond) + time.Millisecond
	return got >= want-d && got <= want+d
}

// TTLNear reports whether got, the PTTL of a key that a script set to want
// after since (read before the call), is right: see [Env.TTLIn].
func (e *Env) TTLNear(got, want time.Duration, since time.Time) bool {
	return e.TTLIn(got, want, want, since)
}

// TTLIn reports whether got, the PTTL of a key that a script set to
// between lo and hi after since (read before the call), is right, called
// once PTTL has answered: in [lo, hi] on miniredis; on redis-server at most
// hi (a TTL only runs down) and at least lo less the time since since,
// rounded up to the millisecond that PTTL counts in. The bound follows the
// time that really passed, so a loaded machine cannot make it flake, and a
// TTL set too short still fails.
func (e *Env) TTLIn(got, lo, hi time.Duration, since time.Time) bool {
	if !e.Exact() {
		lo -= time.Since(since).Truncate(time.Millisecond) + time.Millisecond
	}
	return got >= lo && got <= hi
}

// NearTokens is Near for token counts of a bucket refilling at perSecond
// up to burst: exact on miniredis, within what Slack refills on
// redis-server.
func (e *Env) NearTokens(got, want, perSecond float64, burst int) bool {
	if e.Exact() {
		return got == want
	}
	return math.Abs(got-want) <= Slack.Seconds()*perSecond && got <= float64(burst)
}

// KeySnapshot is a hash key's fields and PTTL.
type KeySnapshot struct {
	Hash map[string]string
	PTTL time.Duration
}

// Snapshot reads the fields and PTTL of the hash at key.
func (e *Env) Snapshot(t testing.TB, key string) KeySnapshot {
	t.Helper()
	h, err := e.RDB.HGetAll(t.Context(), key).Result()
	if err != nil {
		t.Fatal(err)
	}
	ttl, err := e.RDB.PTTL(t.Context(), key).Result()
	if err != nil {
		t.Fatal(err)
	}
	return KeySnapshot{h, ttl}
}

// HSet returns a writer of fieldValues into the hash at key, for tables of
// corrupt state.
func HSet(fieldValues ...string) func(context.Context, *redis.Client, string) error {
	return func(ctx context.Context, rdb *redis.Client, key string) error {
		return rdb.HSet(ctx, key, fieldValues).Err()
	}
}

// Corrupt is a named writer of state that makes no sense at a key, for
// tables of corrupt state.
type Corrupt struct {
	Name  string
	Write func(ctx context.Context, rdb *redis.Client, key string) error
}

// WrongTypes writes a key of another type than the hash a script expects:
// a string and a list.
var WrongTypes = []Corrupt{
	{Name: "string key", Write: func(ctx context.Context, rdb *redis.Client, key string) error {
		return rdb.Set(ctx, key, "junk", 0).Err()
	}},
	{Name: "list key", Write: func(ctx context.Context, rdb *redis.Client, key string) error {
		return rdb.RPush(ctx, key, "a", "b").Err()
	}},
}

// Trips is a go-redis hook that counts a client's round trips (a command,
// or a pipeline) that Match accepts, once each has run: Match gets the
// commands (one for a command), whether they went as a pipeline, and the
// error the client returns (a command's own error is set only after the
// hooks). A nil Match counts every trip.
type Trips struct {
	Match func(cmds []redis.Cmder, pipeline bool, err error) bool
	n     atomic.Int64
}

// Load returns how many trips were counted.
func (h *Trips) Load() int64 { return h.n.Load() }

// Reset sets the count back to 0.
func (h *Trips) Reset() { h.n.Store(0) }

func (h *Trips) DialHook(next redis.DialHook) redis.DialHook { return next }

func (h *Trips) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		err := next(ctx, cmd)
		h.count([]redis.Cmder{cmd}, false, err)
		return err
	}
}

func (h *Trips) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		err := next(ctx, cmds)
		h.count(cmds, true, err)
		return err
	}
}

func (h *Trips) count(cmds []redis.Cmder, pipeline bool, err error) {
	if h.Match == nil || h.Match(cmds, pipeline, err) {
		h.n.Add(1)
	}
}

// NoScriptReply matches a command (not a pipeline) answered NOSCRIPT.
func NoScriptReply(cmds []redis.Cmder, pipeline bool, err error) bool {
	return !pipeline && (redis.HasErrorPrefix(err, "NOSCRIPT") || redis.HasErrorPrefix(cmds[0].Err(), "NOSCRIPT"))
}

// RunsScript matches a trip (a command or a pipeline) with an EVAL or
// EVALSHA in it: not a new connection's handshake.
func RunsScript(cmds []redis.Cmder, _ bool, _ error) bool {
	return slices.ContainsFunc(cmds, func(c redis.Cmder) bool { return c.Name() == "eval" || c.Name() == "evalsha" })
}

// StartsEvalSha matches a pipeline that starts with EVALSHA (a Batcher's
// flush, not the EVAL that follows a NOSCRIPT).
func StartsEvalSha(cmds []redis.Cmder, pipeline bool, _ error) bool {
	return pipeline && len(cmds) > 0 && cmds[0].Name() == "evalsha"
}

// Sum calls call(i) n times in each of g goroutines (i is the goroutine's
// number), all at once, and returns the sum of what the calls answered
// (tokens granted, decreases made): what concurrent callers got from one
// key. An error fails t and ends that goroutine.
func Sum(t testing.TB, g, n int, call func(i int) (int, error)) int {
	var sum atomic.Int64
	var wg sync.WaitGroup
	for i := range g {
		wg.Go(func() {
			for range n {
				v, err := call(i)
				if err != nil {
					t.Error(err)
					return
				}
				sum.Add(int64(v))
			}
		})
	}
	wg.Wait()
	return int(sum.Load())
}
