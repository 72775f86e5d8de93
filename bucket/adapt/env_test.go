package adapt_test

import (
	"context"
	"os"
	"testing"

	"github.com/pacerhq/pacer/bucket"
	"github.com/pacerhq/pacer/bucket/adapt"
	"github.com/pacerhq/pacer/bucket/internal/redistest"
	"github.com/pacerhq/pacer/internal/testenv"
	"github.com/redis/go-redis/v9"
)

func TestMain(m *testing.M) { os.Exit(testenv.Main(m)) }

// t0 is where miniredis's clock starts; slack is the tolerance on
// redis-server's running clock (see redistest).
var t0 = redistest.T0

const slack = redistest.Slack

// env is one backend for one test, with the Adapter under test and the
// bucket.Limiter of the same keys (whose cooldowns a throttle sets).
type env struct {
	*redistest.Env
	l    *adapt.Adapter
	b    *bucket.Limiter
	keys bucket.Keys
}

func newEnv(r *redistest.Env) *env {
	cfg := bucket.Config{Prefix: r.Prefix}
	return &env{Env: r, l: adapt.New(r.RDB, cfg), b: bucket.New(r.RDB, cfg), keys: bucket.NewKeys(r.Prefix)}
}

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
