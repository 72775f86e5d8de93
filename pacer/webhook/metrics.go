package webhook

import "github.com/prometheus/client_golang/prometheus"

type metrics struct {
	requests *prometheus.CounterVec
	events   *prometheus.CounterVec
}

func newMetrics(reg prometheus.Registerer) *metrics {
	m := &metrics{
		requests: counter("pacer_webhook_requests_total", []string{"channel", "result"},
			"Webhook requests by channel (whatsapp, sendgrid, generic) and result: accepted, unsigned, bad-signature, stale, malformed, kafka-failed, verified, bad-verify-token."),
		events: counter("pacer_webhook_events_total", []string{"channel"},
			"Events of accepted webhooks produced to the channel's events topic."),
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
		applied: counter("pacer_webhook_events_applied_total", []string{"channel", "kind"},
			"Events read from the events topics and applied, by channel and kind (the provider's status or event name)."),
		suppressed: counter("pacer_webhook_suppressions_added_total", []string{"channel", "reason"},
			"Suppression entries new to Redis, by channel and reason; a duplicate event adds none."),
		removed: counter("pacer_webhook_suppressions_removed_total", []string{"channel"},
			"Suppression entries removed by the platform's unsuppress outcomes, by channel; one already gone removes none."),
		counted: counter("pacer_webhook_outcomes_total", []string{"channel", "outcome", "result"},
			"Campaign outcomes of applied events, by channel, outcome (device_delivered, read, failed, bounced, suppressed) and result: counted, duplicate (counted before), refused (the campaign's key is not a hash)."),
		throttles: counter("pacer_webhook_throttles_total", []string{"channel", "scope", "result"},
			"Throttles reported by status webhooks, by channel, scope (key, pair, account) and result: decreased (the key's rate lowered), cooldown (a lone throttle or one of the same episode: the key's cooldown only), pair (the pair's cooldown and rate), stale (too late to act on, dropped), duplicate (applied before), skipped (account scope, not applied)."),
		matched: counter("pacer_webhook_provider_id_matches_total", []string{"channel", "found"},
			"Events that named no envelope id looked up by the provider's message id in the ledger, by channel and found (true, false)."),
		resolved: counter("pacer_webhook_unknown_resolved_total", []string{"channel", "outcome"},
			"Unknown outcomes (sends whose answer was lost) the providers' webhooks resolved, by channel and outcome: delivered (counted delivered once), failed (a failed event counted), unresolved (still claimed after the ledger's TTL), dropped (too many waiting)."),
		errors: prometheus.NewCounter(prometheus.CounterOpts{Name: "pacer_webhook_apply_errors_total",
			Help: "Batches of events whose suppressions or counts Redis did not take (retried)."}),
	}
	if reg != nil {
		reg.MustRegister(m.applied, m.suppressed, m.removed, m.counted, m.throttles, m.matched, m.resolved, m.errors)
	}
	return m
}

// counter makes the counter named name (listed in docs/operations.md) by
// the labels given, with its help.
func counter(name string, labels []string, help string) *prometheus.CounterVec {
	return prometheus.NewCounterVec(prometheus.CounterOpts{Name: name, Help: help}, labels)
}
