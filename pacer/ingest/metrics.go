package ingest

import "github.com/prometheus/client_golang/prometheus"

type metrics struct {
	requests    *prometheus.CounterVec
	messages    *prometheus.CounterVec
	refusals    *prometheus.CounterVec
	duration    prometheus.Histogram
	redisCalls  *prometheus.CounterVec
	redisErrors prometheus.Counter
	fallback    prometheus.Gauge
}

func newMetrics(reg prometheus.Registerer) *metrics {
	m := &metrics{
		requests: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "pacer_ingest_requests_total",
			Help: "Ingest answers by HTTP status code."}, []string{"code"}),
		messages: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "pacer_ingest_messages_total",
			Help: "Envelopes by outcome: accepted (acknowledged by Kafka), duplicate (accepted before), rejected (invalid, every line of a 400 too, or in flight elsewhere), failed (Kafka did not acknowledge)."},
			[]string{"outcome"}),
		refusals: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "pacer_ingest_quota_refusals_total",
			Help: "Requests answered 429, by the quota tier that refused."}, []string{"tier"}),
		duration: prometheus.NewHistogram(prometheus.HistogramOpts{Name: "pacer_ingest_request_duration_seconds",
			Help: "Time to answer a POST, in seconds.", Buckets: prometheus.ExponentialBuckets(0.0005, 2, 16)}),
		redisCalls: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "pacer_ingest_redis_calls_total",
			Help: "Redis round trips by call: take, finish (quota scripts), claim (campaign and pacing key owners), published (campaign counts)."}, []string{"call"}),
		redisErrors: prometheus.NewCounter(prometheus.CounterOpts{Name: "pacer_ingest_redis_errors_total",
			Help: "Redis calls (quota, campaign owners, counts and controls) that failed."}),
		fallback: prometheus.NewGauge(prometheus.GaugeOpts{Name: "pacer_ingest_redis_fallback",
			Help: "1 while Redis is unreachable and quotas are enforced per process (PACER_REDIS_FAILURE=local)."}),
	}
	if reg != nil {
		reg.MustRegister(m.requests, m.messages, m.refusals, m.duration, m.redisCalls, m.redisErrors, m.fallback)
	}
	return m
}
