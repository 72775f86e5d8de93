package consumer

import (
	"sync"

	"github.com/pacerhq/pacer/channels"
	"github.com/pacerhq/pacer/pacer/envelope"
	"github.com/pacerhq/pacer/pacer/suppress"
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
	overloaded  *prometheus.GaugeVec     // channel
	lateness    *prometheus.HistogramVec // channel
	throttles   *prometheus.CounterVec   // channel, scope
	handoffs    *prometheus.CounterVec   // channel
	// suppressed, suppressionsAdded: by suppression reason (suppress.Reasons, else other)
	suppressed, suppressionsAdded *prometheus.CounterVec
	portfolioUsed                 *prometheus.GaugeVec   // portfolio
	portfolioDeferred             *prometheus.CounterVec // none
	writes                        *prometheus.CounterVec // channel, kind, topic

	// The children every record updates, looked up once (a vector's
	// WithLabelValues hashes its labels and takes a lock at each call).
	deliveredC, bucketCallsC                           prometheus.Counter
	bucketWaitO, takeLatencyO, sendLatencyO, latenessO prometheus.Observer
	sendsByClass                                       map[string]prometheus.Counter // by class
	successNone                                        prometheus.Counter            // responses: success, no code

	codesMu sync.Mutex
	codes   map[string]bool // provider codes given a label so far
}

// suppressedBy is the pacer_suppressed_total child of reason: one of
// suppress.Reasons, else "other" (an entry written by something newer).
func (m *metrics) suppressedBy(reason string) prometheus.Counter {
	if _, err := suppress.ParseReason(reason); err != nil {
		reason = "other"
	}
	return m.suppressed.WithLabelValues(reason)
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

// counter, gauge and histogram make the collector pacer_<name> by the
// labels given (nil: none), with its help.
func counter(name string, labels []string, help string) *prometheus.CounterVec {
	return prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: "pacer", Name: name, Help: help}, labels)
}

func gauge(name string, labels []string, help string) *prometheus.GaugeVec {
	return prometheus.NewGaugeVec(prometheus.GaugeOpts{Namespace: "pacer", Name: name, Help: help}, labels)
}

func histogram(name string, buckets []float64, labels []string, help string) *prometheus.HistogramVec {
	return prometheus.NewHistogramVec(prometheus.HistogramOpts{Namespace: "pacer", Name: name, Help: help, Buckets: buckets}, labels)
}

func newMetrics(reg prometheus.Registerer) (*metrics, error) {
	m := &metrics{
		codes: map[string]bool{},
		throttles: counter("throttles_total", []string{"scope"},
			"Provider throttles by scope: key (the pacing key's rate), pair (one recipient of a key: WhatsApp 131056, APNs/FCM per device), account (every key behind the same credentials: WhatsApp 80007, 4)."),
		lateSlots: counter("late_slots_total", nil,
			"Send slots given up because the sender woke (or its idempotency claim answered) later after the slot than allowed: half the pacing headroom, (burst - paced burst) / rate / 2, and never less than half a slot interval capped at a quarter of the burst's refill time, at least 1 ms; a new slot was taken, so the provider's window is never crowded."),
		overloaded: gauge("overloaded", nil,
			"1 while more than 1% of the send slots of the last minute were given up as late (pacer_late_slots_total over every slot): the process is asked for more than it carries (CPU, or senders waiting on slow answers); it still sends at the conforming rate what it can. 0 otherwise."),
		lateness: histogram("slot_lateness_seconds", prometheus.ExponentialBuckets(0.0001, 2, 12), nil,
			"How long after its send slot a sender woke (every slot: those used and those given up as late)."),
		bucketCalls: counter("bucket_calls_total", nil,
			"Token-bucket script calls to Redis (reservations and leases); divided by pacer_delivered_total, the bucket's Redis cost per message."),
		fallback: gauge("redis_fallback", nil,
			"1 while Redis is down and PACER_REDIS_FAILURE=local paces in-process; 0 otherwise."),
		responses: counter("responses_total", []string{"class", "code"},
			"Provider answers by class and provider error code (none for success; at most 64 codes, then other)."),
		sends: counter("sends_total", []string{"class"},
			"Requests that left the process for a provider, by the class of the response (success, throttle, transient, permanent, halt, unknown: no answer)."),
		delivered: counter("delivered_total", nil,
			"Messages the provider accepted."),
		duplicates: counter("duplicates_skipped_total", nil,
			"Re-delivered records whose id the idempotency ledger shows as delivered, or dead-lettered while claimed; not sent, not dead-lettered again."),
		suppressed: counter("suppressed_total", []string{"reason"},
			"Records dead-lettered without a request because their recipient is suppressed for their pacing key, by the suppression's reason (unregistered, undeliverable, marketing-limit, bounce, dropped, spamreport, unsubscribe, manual, other)."),
		suppressionsAdded: counter("suppressions_added_total", []string{"reason"},
			"Suppression entries this process wrote from provider answers (a recipient gone: APNs 410 Unregistered or ExpiredToken, FCM UNREGISTERED), by reason."),
		portfolioUsed: gauge("portfolio_used_ratio", []string{"portfolio"},
			"A WhatsApp business portfolio's unique recipients of business-initiated messages in the last 24 h over its tier (messaging limit), as this process's last admission saw it; absent for an unlimited portfolio."),
		portfolioDeferred: counter("portfolio_deferred_total", nil,
			"Business-initiated messages deferred (parked, no attempt) because their portfolio's messaging-limit window was full and their recipient new, or, category marketing, because the portfolio's marketing is paused after a quality downgrade."),
		handoffs: counter("priority_handoffs_total", nil,
			"Send slots a normal-priority record gave to a waiting high-priority record of its pacing key."),
		requeued: counter("requeued_total", []string{"reason"},
			"Records put back on a retry topic without an attempt, by reason (cooldown, token-wait, pair-throttle, pair-cooldown, account-cooldown, breaker, paused, not-before, portfolio-limit, portfolio-quality, pair-limit)."),
		writes: counter("kafka_writes_total", []string{"kind", "topic"},
			"Records this process wrote to Kafka and Kafka acknowledged, by kind (park: a copy beyond its key's lookahead, or of a revoked partition's held records; defer: not_before or a paused campaign; chain: strict order; retry; requeue; dlq) and topic (retry.<n>, park.<n>, dlq); divided by pacer_delivered_total, the Kafka writes per delivered message."),
		retries: counter("retries_total", nil,
			"Records sent to a retry topic after a transient failure or an unknown outcome."),
		dlq: counter("dlq_total", []string{"reason"},
			"Records written to the DLQ topic, by reason (malformed, expired, permanent, attempts-exhausted, unknown-outcome)."),
		bucketWait: histogram("bucket_wait_seconds", prometheus.ExponentialBuckets(0.001, 4, 10), nil,
			"Time a message waited for a token (including cooldowns) before its send."),
		takeLatency: histogram("take_duration_seconds", prometheus.ExponentialBuckets(0.0001, 3, 10), nil,
			"Latency of getting one send slot from the token bucket (a reservation, or a slot of a lease)."),
		sendLatency: histogram("send_duration_seconds", prometheus.ExponentialBuckets(0.001, 3, 10), nil,
			"Latency of one provider request."),
		redisErrors: counter("redis_errors_total", nil,
			"Redis calls (bucket, ledger, the ping as the pacer starts) that failed; the message waits and is never dropped."),
		partitions: gauge("partitions_assigned", nil,
			"Partitions this process currently owns."),
		queued: gauge("records_queued", nil,
			"Records fetched from Kafka and not yet finished, over all owned partitions."),
		ready: gauge("ready", nil,
			"1 when the pacer is consuming and Kafka and Redis answer, else 0 (the same as /readyz)."),
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
	for _, r := range []string{"cooldown", "token-wait", "pair-throttle", "pair-cooldown", "account-cooldown", "breaker", "paused", "not-before", "portfolio-limit", "portfolio-quality", "pair-limit"} {
		m.requeued.WithLabelValues(r)
	}
	m.retries.WithLabelValues()
	for _, r := range suppress.Reasons {
		m.suppressed.WithLabelValues(string(r))
	}
	m.suppressionsAdded.WithLabelValues(string(suppress.Unregistered))
	m.writes.WithLabelValues("park", "retry.1")
	m.handoffs.WithLabelValues()
	m.portfolioDeferred.WithLabelValues()
	m.duplicates.WithLabelValues()
	m.redisErrors.WithLabelValues()
	m.deliveredC = m.delivered.WithLabelValues()
	m.bucketCallsC = m.bucketCalls.WithLabelValues()
	m.bucketWaitO, m.takeLatencyO = m.bucketWait.WithLabelValues(), m.takeLatency.WithLabelValues()
	m.sendLatencyO, m.latenessO = m.sendLatency.WithLabelValues(), m.lateness.WithLabelValues()
	m.successNone = m.responses.WithLabelValues("success", "none")
	m.lateSlots.WithLabelValues()
	m.overloaded.WithLabelValues()
	for _, s := range []channels.Scope{channels.ScopeKey, channels.ScopePair, channels.ScopeAccount} {
		m.throttles.WithLabelValues(s.String())
	}
	for _, c := range []prometheus.Collector{m.sends, m.delivered, m.duplicates, m.requeued, m.handoffs, m.retries, m.writes, m.dlq, m.bucketWait, m.takeLatency,
		m.sendLatency, m.redisErrors, m.partitions, m.queued, m.ready, m.responses, m.fallback, m.bucketCalls, m.lateSlots, m.overloaded, m.lateness, m.throttles,
		m.suppressed, m.suppressionsAdded, m.portfolioUsed, m.portfolioDeferred} {
		if err := reg.Register(c); err != nil {
			return nil, err
		}
	}
	return m, nil
}
