package consumer

import (
	"sync"

	"github.com/pacerhq/pacer/channels"
	"github.com/pacerhq/pacer/pacer/envelope"
	"github.com/prometheus/client_golang/prometheus"
)

// metrics are the collectors the pacer updates; labels are bounded (channel,
// class, reason), never a pacing key, a recipient or a tenant.
type metrics struct {
	sends       *prometheus.CounterVec   // channel, class
	delivered   *prometheus.CounterVec   // channel
	duplicates  *prometheus.CounterVec   // channel
	requeued    *prometheus.CounterVec   // channel, reason
	retries     *prometheus.CounterVec   // channel
	dlq         *prometheus.CounterVec   // channel, reason
	bucketWait  *prometheus.HistogramVec // channel
	takeLatency *prometheus.HistogramVec // channel
	sendLatency *prometheus.HistogramVec // channel
	redisErrors *prometheus.CounterVec   // channel
	partitions  *prometheus.GaugeVec     // channel
	queued      *prometheus.GaugeVec     // channel
	ready       *prometheus.GaugeVec     // channel
	responses   *prometheus.CounterVec   // channel, class, code
	fallback    *prometheus.GaugeVec     // channel
	bucketCalls *prometheus.CounterVec   // channel
	lateSlots   *prometheus.CounterVec   // channel
	lateness    *prometheus.HistogramVec // channel
	throttles   *prometheus.CounterVec   // channel, scope
	handoffs    *prometheus.CounterVec   // channel

	// The children every record updates, looked up once (a vector's
	// WithLabelValues hashes its labels and takes a lock at each call).
	deliveredC, bucketCallsC                           prometheus.Counter
	bucketWaitO, takeLatencyO, sendLatencyO, latenessO prometheus.Observer
	sendsByClass                                       map[string]prometheus.Counter // by class
	successNone                                        prometheus.Counter            // responses: success, no code

	codesMu sync.Mutex
	codes   map[string]bool // provider codes given a label so far
}

// maxCodes bounds the code label of pacer_responses_total: codes beyond the
// first maxCodes distinct ones are counted as "other".
const maxCodes = 64

// response counts one provider answer by class and provider code.
func (m *metrics) response(class string, e *channels.Error) {
	if class == "success" && (e == nil || e.Code == "") {
		m.successNone.Inc()
		return
	}
	code := "none"
	if e != nil && e.Code != "" {
		code = e.Code
	}
	m.codesMu.Lock()
	if !m.codes[code] {
		if len(m.codes) >= maxCodes {
			code = "other"
		} else {
			m.codes[code] = true
		}
	}
	m.codesMu.Unlock()
	m.responses.WithLabelValues(class, code).Inc()
}

func newMetrics(reg prometheus.Registerer) (*metrics, error) {
	m := &metrics{
		codes: map[string]bool{},
		throttles: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: "pacer", Name: "throttles_total",
			Help: "Provider throttles by scope: key (the pacing key's rate), pair (one recipient of a key: WhatsApp 131056, APNs/FCM per device), account (every key behind the same credentials: WhatsApp 80007, 4).",
		}, []string{"scope"}),
		lateSlots: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: "pacer", Name: "late_slots_total",
			Help: "Send slots given up because the sender woke (or its idempotency claim answered) later after the slot than allowed: half the pacing headroom, (burst - paced burst) / rate / 2, and never less than half a slot interval capped at a quarter of the burst's refill time, at least 1 ms; a new slot was taken, so the provider's window is never crowded.",
		}, nil),
		lateness: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Namespace: "pacer", Name: "slot_lateness_seconds",
			Help:    "How long after its send slot a sender woke (every slot: those used and those given up as late).",
			Buckets: prometheus.ExponentialBuckets(0.0001, 2, 12),
		}, nil),
		bucketCalls: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: "pacer", Name: "bucket_calls_total",
			Help: "Token-bucket script calls to Redis (reservations and leases); divided by pacer_delivered_total, the bucket's Redis cost per message.",
		}, nil),
		fallback: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Namespace: "pacer", Name: "redis_fallback",
			Help: "1 while Redis is down and PACER_REDIS_FAILURE=local paces in-process; 0 otherwise.",
		}, nil),
		responses: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: "pacer", Name: "responses_total",
			Help: "Provider answers by class and provider error code (none for success; at most 64 codes, then other).",
		}, []string{"class", "code"}),
		sends: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: "pacer", Name: "sends_total",
			Help: "Requests that left the process for a provider, by the class of the response (success, throttle, transient, permanent, halt, unknown: no answer).",
		}, []string{"class"}),
		delivered: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: "pacer", Name: "delivered_total",
			Help: "Messages the provider accepted.",
		}, nil),
		duplicates: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: "pacer", Name: "duplicates_skipped_total",
			Help: "Re-delivered records whose id the idempotency ledger shows as delivered, or dead-lettered while claimed; not sent, not dead-lettered again.",
		}, nil),
		handoffs: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: "pacer", Name: "priority_handoffs_total",
			Help: "Send slots a normal-priority record gave to a waiting high-priority record of its pacing key.",
		}, nil),
		requeued: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: "pacer", Name: "requeued_total",
			Help: "Records put back on a retry topic without an attempt, by reason (cooldown, token-wait, pair-throttle, pair-cooldown, account-cooldown, breaker, paused, not-before).",
		}, []string{"reason"}),
		retries: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: "pacer", Name: "retries_total",
			Help: "Records sent to a retry topic after a transient failure or an unknown outcome.",
		}, nil),
		dlq: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: "pacer", Name: "dlq_total",
			Help: "Records written to the DLQ topic, by reason (malformed, expired, permanent, attempts-exhausted, unknown-outcome).",
		}, []string{"reason"}),
		bucketWait: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Namespace: "pacer", Name: "bucket_wait_seconds",
			Help:    "Time a message waited for a token (including cooldowns) before its send.",
			Buckets: prometheus.ExponentialBuckets(0.001, 4, 10),
		}, nil),
		takeLatency: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Namespace: "pacer", Name: "take_duration_seconds",
			Help:    "Latency of getting one send slot from the token bucket (a reservation, or a slot of a lease).",
			Buckets: prometheus.ExponentialBuckets(0.0001, 3, 10),
		}, nil),
		sendLatency: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Namespace: "pacer", Name: "send_duration_seconds",
			Help:    "Latency of one provider request.",
			Buckets: prometheus.ExponentialBuckets(0.001, 3, 10),
		}, nil),
		redisErrors: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: "pacer", Name: "redis_errors_total",
			Help: "Redis calls (bucket, ledger, the ping as the pacer starts) that failed; the message waits and is never dropped.",
		}, nil),
		partitions: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Namespace: "pacer", Name: "partitions_assigned",
			Help: "Partitions this process currently owns.",
		}, nil),
		queued: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Namespace: "pacer", Name: "records_queued",
			Help: "Records fetched from Kafka and not yet finished, over all owned partitions.",
		}, nil),
		ready: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Namespace: "pacer", Name: "ready",
			Help: "1 when the pacer is consuming and Kafka and Redis answer, else 0 (the same as /readyz).",
		}, nil),
	}
	// Known label values exist from the start, so alerts and rate() see 0
	// before the first event.
	m.sendsByClass = map[string]prometheus.Counter{}
	for _, c := range []string{"success", "throttle", "transient", "permanent", "halt", "unknown"} {
		m.sendsByClass[c] = m.sends.WithLabelValues(c)
	}
	for _, r := range envelope.DLQReasons {
		m.dlq.WithLabelValues(r)
	}
	for _, r := range []string{"cooldown", "token-wait", "pair-throttle", "pair-cooldown", "account-cooldown", "breaker", "paused", "not-before"} {
		m.requeued.WithLabelValues(r)
	}
	m.retries.WithLabelValues()
	m.handoffs.WithLabelValues()
	m.duplicates.WithLabelValues()
	m.redisErrors.WithLabelValues()
	m.deliveredC = m.delivered.WithLabelValues()
	m.bucketCallsC = m.bucketCalls.WithLabelValues()
	m.bucketWaitO, m.takeLatencyO = m.bucketWait.WithLabelValues(), m.takeLatency.WithLabelValues()
	m.sendLatencyO, m.latenessO = m.sendLatency.WithLabelValues(), m.lateness.WithLabelValues()
	m.successNone = m.responses.WithLabelValues("success", "none")
	m.lateSlots.WithLabelValues()
	for _, s := range []channels.Scope{channels.ScopeKey, channels.ScopePair, channels.ScopeAccount} {
		m.throttles.WithLabelValues(s.String())
	}
	for _, c := range []prometheus.Collector{m.sends, m.delivered, m.duplicates, m.requeued, m.handoffs, m.retries, m.dlq, m.bucketWait, m.takeLatency,
		m.sendLatency, m.redisErrors, m.partitions, m.queued, m.ready, m.responses, m.fallback, m.bucketCalls, m.lateSlots, m.lateness, m.throttles} {
		if err := reg.Register(c); err != nil {
			return nil, err
		}
	}
	return m, nil
}
