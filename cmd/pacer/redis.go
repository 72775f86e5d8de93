package main

import (
	"strings"

	"github.com/redis/go-redis/v9"
)

// newRedis connects to Redis as configured: a Redis Cluster when
// PACER_REDIS_CLUSTER_ADDRS is set, a Sentinel-managed master when
// PACER_REDIS_SENTINEL_ADDRS is, else the single server of PACER_REDIS_URL.
// Every bucket key of one pacing key shares a hash tag, so each script call
// stays in one cluster slot. Errors name the variable and never echo the URL
// (it may hold a password).
func newRedis(cfg config) (redis.UniversalClient, error) {
	switch {
	case cfg.RedisClusterAddrs != "":
		return redis.NewClusterClient(&redis.ClusterOptions{
			Addrs: splitList(cfg.RedisClusterAddrs), Password: cfg.RedisPassword,
		}), nil
	case cfg.RedisSentinelAddrs != "":
		if cfg.RedisSentinelMaster == "" {
			return nil, &configError{"PACER_REDIS_SENTINEL_MASTER", "required with PACER_REDIS_SENTINEL_ADDRS"}
		}
		return redis.NewFailoverClient(&redis.FailoverOptions{
			MasterName: cfg.RedisSentinelMaster, SentinelAddrs: splitList(cfg.RedisSentinelAddrs),
			Password: cfg.RedisPassword,
		}), nil
	}
	o, err := redis.ParseURL(cfg.RedisURL)
	if err != nil {
		return nil, &configError{"PACER_REDIS_URL", "cannot parse the URL (check host, port and database)"}
	}
	return redis.NewClient(o), nil
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
