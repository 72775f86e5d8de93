package webhook

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"time"

	"github.com/pacerhq/pacer/pacer/control"
	"github.com/pacerhq/pacer/pacer/portfolio"
	"github.com/pacerhq/pacer/pacer/suppress"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/twmb/franz-go/pkg/kgo"
)

// Outcomes applies the events of the events topics: suppression ([Event]
// suppression reasons), the tiers of business portfolios, and the counts
// of each campaign's outcomes ([Outcomes.WithCounts]); resolving unknown
// outcomes is not done yet.
//
// Applying is idempotent: an event's entry is a function of the event
// alone (its expiry runs from the provider's timestamp, not from when it
// is applied), so the same event applied twice, as a provider's retry or
// a replayed offset delivers it, writes the same entry, and
// pacer_webhook_suppressions_added_total counts it once; a campaign's
// counters go up once per message and outcome kind
// (control.Store.CountOutcomes), whatever the order and the number of
// times its events come.
type Outcomes struct {
	store      *suppress.Store
	portfolios *portfolio.Store // nil: tiers announced are not applied
	counts     *control.Store   // nil: outcomes are not counted per campaign
	log        *slog.Logger
	m          *outcomeMetrics
}

// NewOutcomes returns Outcomes writing to store, registering its
// metrics with reg (nil: none).
func NewOutcomes(store *suppress.Store, log *slog.Logger, reg prometheus.Registerer) *Outcomes {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	return &Outcomes{store: store, log: log, m: newOutcomeMetrics(reg)}
}

// WithCounts makes o count each campaign's outcomes in st's campaign
// hashes (device_delivered, read, failed:<reason>, bounced:<reason>,
// suppressed:<reason>; see [Event] outcomes), each message once per kind;
// it returns o.
func (o *Outcomes) WithCounts(st *control.Store) *Outcomes {
	o.counts = st
	return o
}

// WithPortfolios makes o apply WhatsApp's business_capability_update
// tiers to the business portfolio of the account that announced them
// (portfolio.Store.SetAccount); it returns o.
func (o *Outcomes) WithPortfolios(st *portfolio.Store) *Outcomes {
	o.portfolios = st
	return o
}

// Apply applies evs: one suppress.Store.Add per pacing key and reason
// that has entries, then one control.Store.CountOutcomes per channel and
// [maxCounted] outcomes. An error leaves the batch to be applied again
// whole: the suppressions write the same entries and the counts add only
// what was not counted.
func (o *Outcomes) Apply(ctx context.Context, evs []Event) error {
	type group struct {
		channel, key string
		reason       suppress.Reason
	}
	entries := map[group][]suppress.Entry{}
	for _, ev := range evs {
		reason, ok := ev.suppression()
		if !ok {
			continue
		}
		g := group{ev.Channel, ev.Key, reason}
		for _, h := range ev.Recipients {
			entries[g] = append(entries[g], suppress.New(h, reason, ev.At, ev.At))
		}
	}
	for _, ev := range evs {
		if ev.Kind != "tier" || o.portfolios == nil {
			continue
		}
		p, ok, err := o.portfolios.OfAccount(ctx, ev.Channel, ev.Account)
		if err == nil && ok {
			err = o.portfolios.SetTier(ctx, ev.Channel, p, ev.Tier)
		}
		if err != nil {
			o.m.errors.Inc()
			return fmt.Errorf("webhook: apply the tier of account %s: %w", ev.Account, err)
		}
		if !ok {
			o.log.Warn("messaging-limit tier announced for an account without a portfolio; `pacer portfolio set --account` names it",
				"account", ev.Account, "tier", portfolio.TierString(ev.Tier))
			continue
		}
		o.log.Info("messaging-limit tier applied", "account", ev.Account, "portfolio", p, "tier", portfolio.TierString(ev.Tier))
	}
	for g, es := range entries {
		n, err := o.store.Add(ctx, g.channel, g.key, es...)
		if err != nil {
			o.m.errors.Inc()
			return fmt.Errorf("webhook: apply %d suppressions of %s/%s: %w", len(es), g.channel, g.key, err)
		}
		o.m.suppressed.WithLabelValues(g.channel, string(g.reason)).Add(float64(n))
	}
	if err := o.count(ctx, evs); err != nil {
		o.m.errors.Inc()
		return err
	}
	for _, ev := range evs {
		o.m.applied.WithLabelValues(label(ev.Channel, channels), label(ev.Kind, kinds)).Inc()
	}
	return nil
}

// maxCounted is the most outcomes one CountOutcomes call carries (two
// keys each).
const maxCounted = 500

// count counts the campaign outcomes of evs, per channel.
func (o *Outcomes) count(ctx context.Context, evs []Event) error {
	if o.counts == nil {
		return nil
	}
	byChannel := map[string][]control.Outcome{}
	var order []string
	for _, ev := range evs {
		outs := ev.outcomes()
		if len(outs) == 0 {
			continue
		}
		if _, ok := byChannel[ev.Channel]; !ok {
			order = append(order, ev.Channel)
		}
		byChannel[ev.Channel] = append(byChannel[ev.Channel], outs...)
	}
	for _, ch := range order {
		outs := byChannel[ch]
		for len(outs) > 0 {
			n := min(len(outs), maxCounted)
			got, err := o.counts.CountOutcomes(ctx, ch, outs[:n])
			if err != nil {
				return fmt.Errorf("webhook: count %d outcomes of %s: %w", n, ch, err)
			}
			for i, r := range got {
				result := map[int]string{1: "counted", 0: "duplicate", -1: "refused"}[r]
				o.m.counted.WithLabelValues(label(ch, channels), outs[i].Kind, result).Inc()
				if r < 0 {
					o.log.Warn("campaign outcome not counted: the campaign's key holds another type than a hash",
						"channel", ch, "campaign", outs[i].Campaign, "outcome", outs[i].Kind)
				}
			}
			outs = outs[n:]
		}
	}
	return nil
}

// channels and kinds bound the labels of pacer_webhook_events_applied_total:
// a record someone else wrote to an events topic may say anything.
var (
	channels = map[string]bool{"whatsapp": true, "sendgrid": true}
	kinds    = map[string]bool{"sent": true, "delivered": true, "read": true, "failed": true, "processed": true, "deferred": true,
		"bounce": true, "dropped": true, "spamreport": true, "unsubscribe": true, "group_unsubscribe": true,
		"open": true, "click": true, "group_resubscribe": true, "tier": true}
)

// label returns v if known holds it, else "other".
func label(v string, known map[string]bool) string {
	if known[v] {
		return v
	}
	return "other"
}

// Run consumes kc (a group consumer of the events topics, auto-commit
// off) until ctx ends: each poll's events are applied, again every
// second until Redis takes them, and only then committed. A record that
// is not an Event is logged and skipped.
func (o *Outcomes) Run(ctx context.Context, kc *kgo.Client) error {
	for {
		fs := kc.PollFetches(ctx)
		if ctx.Err() != nil {
			return nil
		}
		fs.EachError(func(t string, p int32, err error) {
			o.log.Warn("events topic fetch failed", "topic", t, "partition", p, "err", err)
		})
		var evs []Event
		fs.EachRecord(func(r *kgo.Record) {
			var ev Event
			if err := json.Unmarshal(r.Value, &ev); err != nil || ev.Channel == "" {
				o.log.Warn("events topic record is not an event; skipped", "topic", r.Topic, "partition", r.Partition, "offset", r.Offset)
				return
			}
			evs = append(evs, ev)
		})
		for {
			err := o.Apply(ctx, evs)
			if err == nil {
				break
			}
			o.log.Warn("events not applied; retrying in 1s", "err", err)
			select {
			case <-ctx.Done():
				return nil
			case <-time.After(time.Second):
			}
		}
		if err := kc.CommitUncommittedOffsets(ctx); err != nil && ctx.Err() == nil {
			o.log.Warn("events topic offsets not committed; the events will be applied again", "err", err)
		}
	}
}
