package webhook

import "github.com/prometheus/client_golang/prometheus"

type metrics struct {
	requests *prometheus.CounterVec
	events   *prometheus.CounterVec
}

func newMetrics(reg prometheus.Registerer) *metrics {
	m := &metrics{
		requests: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "pacer_webhook_requests_total",
			Help: "Webhook requests by channel (whatsapp, sendgrid, generic) and result: accepted, unsigned, bad-signature, stale, malformed, kafka-failed, verified, bad-verify-token."},
			[]string{"channel", "result"}),
		events: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "pacer_webhook_events_total",
			Help: "Events of accepted webhooks produced to the channel's events topic."}, []string{"channel"}),
	}
	if reg != nil {
		reg.MustRegister(m.requests, m.events)
	}
	return m
}

type outcomeMetrics struct {
	applied    *prometheus.CounterVec
	suppressed *prometheus.CounterVec
	removed    *prometheus.CounterVec
	counted    *prometheus.CounterVec
	throttles  *prometheus.CounterVec
	matched    *prometheus.CounterVec
	resolved   *prometheus.CounterVec
	errors     prometheus.Counter
}

func newOutcomeMetrics(reg prometheus.Registerer) *outcomeMetrics {
	m := &outcomeMetrics{
		applied: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "pacer_webhook_events_applied_total",
			Help: "Events read from the events topics and applied, by channel and kind (the provider's status or event name)."},
			[]string{"channel", "kind"}),
		suppressed: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "pacer_webhook_suppressions_added_total",
			Help: "Suppression entries new to Redis, by channel and reason; a duplicate event adds none."},
			[]string{"channel", "reason"}),
		removed: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "pacer_webhook_suppressions_removed_total",
			Help: "Suppression entries removed by the platform's unsuppress outcomes, by channel; one already gone removes none."},
			[]string{"channel"}),
		counted: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "pacer_webhook_outcomes_total",
			Help: "Campaign outcomes of applied events, by channel, outcome (device_delivered, read, failed, bounced, suppressed) and result: counted, duplicate (counted before), refused (the campaign's key is not a hash)."},
			[]string{"channel", "outcome", "result"}),
		throttles: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "pacer_webhook_throttles_total",
			Help: "Throttles reported by status webhooks, by channel, scope (key, pair, account) and result: decreased (the key's rate lowered), cooldown (a lone throttle or one of the same episode: the key's cooldown only), pair (the pair's cooldown and rate), stale (too late to act on, dropped), duplicate (applied before), skipped (account scope, not applied)."},
			[]string{"channel", "scope", "result"}),
		matched: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "pacer_webhook_provider_id_matches_total",
			Help: "Events that named no envelope id looked up by the provider's message id in the ledger, by channel and found (true, false)."},
			[]string{"channel", "found"}),
		resolved: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "pacer_webhook_unknown_resolved_total",
			Help: "Unknown outcomes (sends whose answer was lost) the providers' webhooks resolved, by channel and outcome: delivered (counted delivered once), failed (a failed event counted), unresolved (still claimed after the ledger's TTL), dropped (too many waiting)."},
			[]string{"channel", "outcome"}),
		errors: prometheus.NewCounter(prometheus.CounterOpts{Name: "pacer_webhook_apply_errors_total",
			Help: "Batches of events whose suppressions or counts Redis did not take (retried)."}),
	}
	if reg != nil {
		reg.MustRegister(m.applied, m.suppressed, m.removed, m.counted, m.throttles, m.matched, m.resolved, m.errors)
	}
	return m
}
