package adapt_test

import (
	"context"
	"os"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/pacerhq/pacer/bucket"
	"github.com/pacerhq/pacer/bucket/adapt"
	"github.com/pacerhq/pacer/internal/redistest"
	"github.com/pacerhq/pacer/internal/testenv"
	"github.com/redis/go-redis/v9"
)

func TestMain(m *testing.M) { os.Exit(testenv.Main(m)) }

// ms shortens the tables; cd is the cooldown of capacityAIMD's throttles.
const ms, cd = time.Millisecond, 10 * time.Millisecond

// env is one backend for one test, with the Adapter under test and the
// bucket.Limiter of the same keys (whose cooldowns a throttle sets).
type env struct {
	*redistest.Env
	rdb  *redis.Client
	mr   *miniredis.Miniredis // nil on redis-server
	l    *adapt.Adapter
	b    *bucket.Limiter
	keys bucket.Keys
}

func newEnv(r *redistest.Env) *env {
	cfg := bucket.Config{Prefix: r.Prefix}
	return &env{Env: r, rdb: r.RDB, mr: r.MR, l: adapt.New(r.RDB, cfg), b: bucket.New(r.RDB, cfg), keys: bucket.NewKeys(r.Prefix)}
}

func (e *env) at(d time.Duration)                { e.At(d) }
func (e *env) mark()                             { e.Mark() }
func (e *env) exact() bool                       { return e.Exact() }
func (e *env) near(got, want time.Duration) bool { return e.Near(got, want) }

// nearTokens is near for token counts of a bucket under lim.
func (e *env) nearTokens(got, want float64, lim bucket.Limit) bool {
	return e.NearTokens(got, want, lim.PerSecond, lim.Burst)
}

type snapshot struct {
	hash map[string]string
	pttl time.Duration
}

// snapshot reads the fields and PTTL of the hash at key.
func (e *env) snapshot(t *testing.T, key string) snapshot {
	s := e.Snapshot(t, key)
	return snapshot{s.Hash, s.PTTL}
}

// hset writes fieldValues into the hash at a key, for tables of corrupt
// state.
var hset = redistest.HSet

func each(t *testing.T, f func(t *testing.T, e *env)) {
	redistest.Each(t, func(t *testing.T, r *redistest.Env) { f(t, newEnv(r)) })
}

func newMini(t testing.TB) *env { return newEnv(redistest.Mini(t)) }

// noRedis fails the test on any Redis call (its nil Scripter panics).
type noRedis struct{ redis.Scripter }

// fakeReply is a Scripter whose every script replies v.
type fakeReply struct {
	redis.Scripter
	v any
}

func (f fakeReply) EvalSha(ctx context.Context, _ string, _ []string, _ ...any) *redis.Cmd {
	return redis.NewCmdResult(f.v, nil)
}
