package main

import (
	"context"
	"crypto/tls"
	"fmt"
	"strings"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"
)

// newRedis connects to Redis as configured: a Redis Cluster when
// PACER_REDIS_CLUSTER_ADDRS is set, a Sentinel-managed master when
// PACER_REDIS_SENTINEL_ADDRS is, else the single server of PACER_REDIS_URL.
// In every mode PACER_REDIS_USERNAME and PACER_REDIS_PASSWORD log in (an
// ACL user, or the default user with a password; for the single server
// the URL's own user and password may do instead), and TLS is on with
// PACER_REDIS_TLS or a rediss:// URL, checked against PACER_REDIS_TLS_CA_FILE
// and with the client certificate of PACER_REDIS_TLS_CERT_FILE if set.
// Every bucket key of one pacing key shares a hash tag, so each script call
// stays in one cluster slot. Errors name the variable and never echo the URL
// (it may hold a password).
func newRedis(cfg config) (redis.UniversalClient, error) {
	var tc *tls.Config
	if cfg.redisTLS() {
		var err error
		if tc, err = cfg.redisTLSSettings().config(); err != nil {
			return nil, err
		}
	}
	switch {
	case cfg.RedisClusterAddrs != "":
		return redis.NewClusterClient(&redis.ClusterOptions{
			Addrs: splitList(cfg.RedisClusterAddrs), Username: cfg.RedisUsername, Password: cfg.RedisPassword, TLSConfig: tc,
		}), nil
	case cfg.RedisSentinelAddrs != "":
		if cfg.RedisSentinelMaster == "" {
			return nil, &configError{"PACER_REDIS_SENTINEL_MASTER", "required with PACER_REDIS_SENTINEL_ADDRS"}
		}
		return redis.NewFailoverClient(&redis.FailoverOptions{
			MasterName: cfg.RedisSentinelMaster, SentinelAddrs: splitList(cfg.RedisSentinelAddrs),
			Username: cfg.RedisUsername, Password: cfg.RedisPassword, TLSConfig: tc,
		}), nil
	}
	o, err := redis.ParseURL(cfg.RedisURL)
	if err != nil {
		return nil, &configError{"PACER_REDIS_URL", "cannot parse the URL (check host, port and database)"}
	}
	if cfg.RedisUsername != "" || cfg.RedisPassword != "" {
		if o.Username != "" || o.Password != "" {
			return nil, &configError{"PACER_REDIS_URL and PACER_REDIS_USERNAME or PACER_REDIS_PASSWORD", "give the user and password in one of them, not both"}
		}
		o.Username, o.Password = cfg.RedisUsername, cfg.RedisPassword
	}
	if tc != nil {
		if tc.ServerName == "" && o.TLSConfig != nil {
			tc.ServerName = o.TLSConfig.ServerName // the URL's host
		}
		o.TLSConfig = tc
	}
	return redis.NewClient(o), nil
}

// pingRedis connects to cfg's Redis, silences go-redis's own log lines
// (dial retries, which would interleave with a command's output) and sends
// a PING, waiting at most within. It returns the client (the caller closes
// it) and the PING's outcome, ping; err is a setting newRedis refused, and
// then there is no client.
func pingRedis(ctx context.Context, cfg config, within time.Duration) (rdb redis.UniversalClient, ping, err error) {
	if rdb, err = newRedis(cfg); err != nil {
		return nil, nil, err
	}
	redis.SetLogger(quietRedis{})
	pctx, cancel := context.WithTimeout(ctx, within)
	defer cancel()
	return rdb, rdb.Ping(pctx).Err(), nil
}

// commandRedis reads ch's settings for an operator command and opens their
// Redis, checking within 3 s that it answers: a Redis that does not is an
// error naming the settings (and a hint where one fits). cmd ("limit set")
// prefixes the errors; a setting's error is errConfig's. The caller closes
// the client.
func commandRedis(ctx context.Context, lookup func(string) (string, bool), ch *channel, cmd string) (config, redis.UniversalClient, error) {
	cfg, err := loadConfig(lookup, ch)
	if err != nil {
		return cfg, nil, fmt.Errorf("%w: %w", errConfig, err)
	}
	rdb, ping, err := pingRedis(ctx, cfg, 3*time.Second)
	if err != nil {
		return cfg, nil, fmt.Errorf("%s: %w", cmd, err)
	}
	if ping != nil {
		rdb.Close()
		if h := redisHint(cfg, ping); h != "" {
			return cfg, nil, fmt.Errorf("%s: cannot reach Redis: %s: %v", cmd, h, ping)
		}
		return cfg, nil, fmt.Errorf("%s: cannot reach Redis (%s): %v", cmd, redisSetting(cfg), ping)
	}
	return cfg, rdb, nil
}

// onEachServer runs scan on the single server of rdb, or on every master
// of a cluster (concurrently: scan must be safe for that), and returns the
// first error. A client of any other type scans nothing.
func onEachServer(ctx context.Context, rdb redis.UniversalClient, scan func(context.Context, *redis.Client) error) error {
	switch c := rdb.(type) {
	case *redis.ClusterClient:
		return c.ForEachMaster(ctx, scan)
	case *redis.Client:
		return scan(ctx, c)
	}
	return nil
}

func splitList(s string) []string {
	var out []string
	for _, p := range strings.Split(s, ",") {
		if p = strings.TrimSpace(p); p != "" {
			out = append(out, p)
		}
	}
	return out
}

// roundTrips counts the requests a go-redis client makes of Redis: one per
// command, one per pipeline (or transaction) however many commands it
// carries. Add it with AddHook; it is read as pacer_redis_round_trips_total.
type roundTrips struct{ n atomic.Int64 }

func (h *roundTrips) DialHook(next redis.DialHook) redis.DialHook { return next }

func (h *roundTrips) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		h.n.Add(1)
		return next(ctx, cmd)
	}
}

func (h *roundTrips) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		h.n.Add(1)
		return next(ctx, cmds)
	}
}

// collector returns pacer_redis_round_trips_total{channel} for h.
func (h *roundTrips) collector(channel string) prometheus.Collector {
	return prometheus.NewCounterFunc(prometheus.CounterOpts{
		Name:        "pacer_redis_round_trips_total",
		Help:        "Requests made of Redis: one per command, one per pipeline however many commands it carries.",
		ConstLabels: prometheus.Labels{"channel": channel},
	}, func() float64 { return float64(h.n.Load()) })
}
