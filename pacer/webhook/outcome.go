package webhook

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/pacerhq/pacer/internal/tick"
	"github.com/pacerhq/pacer/pacer/control"
	"github.com/pacerhq/pacer/pacer/portfolio"
	"github.com/pacerhq/pacer/pacer/suppress"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/twmb/franz-go/pkg/kgo"
)

// Outcomes applies the events of the events topics: suppressions ([Event]
// suppression reasons; the platform's suppress and unsuppress outcomes,
// [Server] generic route), the counts of each campaign's outcomes
// ([Outcomes.WithCounts]) and, with WithPortfolios, WhatsApp's account
// events (tiers, quality, throughput upgrades), with WithThrottles the
// throttles a failed status reports and, with WithLedger, the matching of
// events by the provider's message id and the resolution of unknown
// outcomes (resolve.go).
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
	store        *suppress.Store
	portfolios   *portfolio.Store // nil: tiers and quality announced are not applied
	limits       *control.Store   // nil: throughput upgrades are not applied
	counts       *control.Store   // nil: outcomes are not counted per campaign
	qualityPause bool             // a quality downgrade pauses its portfolio's marketing
	throttles    *throttles       // nil: throttles reported by webhook are not applied (WithThrottles)
	now          func() time.Time // the clock a throttle's staleness is read on
	resolve      *resolver        // nil: no matching by provider id, no unknown outcome resolved
	log          *slog.Logger
	m            *outcomeMetrics

	numbersMu sync.Mutex
	numbers   map[string]string // display number -> pacing key this process recorded
	unplaced  map[string]bool   // display numbers whose tier found no portfolio, logged once
}

// UpgradedThroughput is a WhatsApp number's throughput once Meta upgraded
// it, in msgs/s: "1,000 msg/s by automatic upgrade", announced by
// phone_number_quality_update with event THROUGHPUT_UPGRADE (providers.md
// §1.1 and §8.2, developers.facebook.com/documentation/business-messaging/whatsapp/throughput).
const UpgradedThroughput = 1000.0

// NewOutcomes returns Outcomes writing to store, registering its
// metrics with reg (nil: none).
func NewOutcomes(store *suppress.Store, log *slog.Logger, reg prometheus.Registerer) *Outcomes {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	return &Outcomes{store: store, now: time.Now, log: log, m: newOutcomeMetrics(reg)}
}

// WithCounts makes o count each campaign's outcomes in st's campaign
// hashes (device_delivered, read, failed:<reason>, bounced:<reason>,
// suppressed:<reason>; see [Event] outcomes), each message once per kind;
// it returns o.
func (o *Outcomes) WithCounts(st *control.Store) *Outcomes {
	o.counts = st
	return o
}

// WithPortfolios makes o apply WhatsApp's messaging-limit tiers
// (portfolio.Store.SetTier, read by every replica's guard at its next
// admission): a business_capability_update's to the business portfolio of
// the account that announced it (portfolio.Store.SetAccount), a
// phone_number_quality_update's to the portfolio of its display number
// (the pacing key status webhooks named beside it, in a portfolio by
// `pacer portfolio set --key`; else its account's). It records quality
// events too (WithQualityPause). It returns o.
func (o *Outcomes) WithPortfolios(st *portfolio.Store) *Outcomes {
	o.portfolios = st
	return o
}

// WithLimits makes o apply WhatsApp's throughput upgrades
// (phone_number_quality_update, event THROUGHPUT_UPGRADE): the number's
// per-key limit (control.Store.SetLimit, as `pacer limit set` writes it,
// re-read by every pacer within about a second) becomes
// [UpgradedThroughput] msgs/s, its burst kept from the key's limit if one
// was set, else 0 (the channel's configured burst: Meta documents no
// burst). The event names the number by its display number: the key is
// the one status webhooks named with it (their metadata), recorded as
// they are applied; it needs WithPortfolios. It returns o.
func (o *Outcomes) WithLimits(ctl *control.Store) *Outcomes {
	o.limits = ctl
	return o
}

// WithQualityPause makes a quality downgrade (phone_number_quality_update,
// event FLAGGED or DOWNGRADE) pause the marketing of the portfolio of the
// account that announced it, when pause is true
// (PACER_WEBHOOK_QUALITY_PAUSE): its keys' category marketing messages are
// deferred until `pacer portfolio resume` or an upgrade event (UNFLAGGED,
// UPGRADE, THROUGHPUT_UPGRADE). Off, a downgrade is only recorded as the
// portfolio's quality. It returns o.
func (o *Outcomes) WithQualityPause(pause bool) *Outcomes {
	o.qualityPause = pause
	return o
}

// Apply applies evs: one suppress.Store.Add per pacing key and reason
// that has entries, then one control.Store.CountOutcomes per channel and
// [maxCounted] outcomes. An error leaves the batch to be applied again
// whole: the suppressions write the same entries and the counts add only
// what was not counted.
func (o *Outcomes) Apply(ctx context.Context, evs []Event) error {
	evs, err := o.match(ctx, evs)
	if err != nil {
		o.m.errors.Inc()
		return err
	}
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
	// Numbers first: a tier or quality event naming a display number finds
	// the key a status of the same batch named beside it.
	if err := o.applyNumbers(ctx, evs); err != nil {
		o.m.errors.Inc()
		return err
	}
	// Then tiers, then quality events: a batch's tier is set before a
	// quality event of the same batch is looked at.
	for _, kind := range []struct {
		name  string
		apply func(context.Context, Event) error
	}{{"tier", o.applyTier}, {"quality", o.applyQuality}} {
		for _, ev := range evs {
			if ev.Kind != kind.name || o.portfolios == nil {
				continue
			}
			if err := kind.apply(ctx, ev); err != nil {
				o.m.errors.Inc()
				return err
			}
		}
	}
	for g, es := range entries {
		n, err := o.store.Add(ctx, g.channel, g.key, es...)
		if err != nil {
			o.m.errors.Inc()
			return fmt.Errorf("webhook: apply %d suppressions of %s/%s: %w", len(es), g.channel, g.key, err)
		}
		o.m.suppressed.WithLabelValues(g.channel, string(g.reason)).Add(float64(n))
	}
	if err := o.applyPlatform(ctx, evs); err != nil {
		o.m.errors.Inc()
		return err
	}
	failed, err := o.count(ctx, evs)
	if err != nil {
		o.m.errors.Inc()
		return err
	}
	if err := o.resolveUnknown(ctx, evs, failed); err != nil {
		o.m.errors.Inc()
		return err
	}
	// Throttles last: those applied are not applied again when the batch
	// is (throttle.go).
	if err := o.applyThrottles(ctx, evs); err != nil {
		o.m.errors.Inc()
		return err
	}
	for _, ev := range evs {
		o.m.applied.WithLabelValues(label(ev.Channel, knownChannels), label(ev.Kind, kinds)).Inc()
	}
	return nil
}

// maxCounted is the most outcomes one CountOutcomes call carries (two
// keys each).
const maxCounted = 500

// failure is a failed outcome counted now and the event that counted it.
type failure struct {
	event  Event
	reason string
}

// count counts the campaign outcomes of evs, per channel, and returns the
// failed ones counted now (not before).
func (o *Outcomes) count(ctx context.Context, evs []Event) ([]failure, error) {
	if o.counts == nil {
		return nil, nil
	}
	byChannel := map[string][]control.Outcome{}
	events := map[string][]Event{} // the event of each outcome of byChannel
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
		for range outs {
			events[ev.Channel] = append(events[ev.Channel], ev)
		}
	}
	var failed []failure
	for _, ch := range order {
		outs, ofs := byChannel[ch], events[ch]
		for len(outs) > 0 {
			n := min(len(outs), maxCounted)
			got, err := o.counts.CountOutcomes(ctx, ch, outs[:n])
			if err != nil {
				return nil, fmt.Errorf("webhook: count %d outcomes of %s: %w", n, ch, err)
			}
			for i, r := range got {
				if r == 1 && outs[i].Kind == control.Failed {
					failed = append(failed, failure{ofs[i], outs[i].Reason})
				}
				result := map[int]string{1: "counted", 0: "duplicate", -1: "refused"}[r]
				o.m.counted.WithLabelValues(label(ch, knownChannels), outs[i].Kind, result).Inc()
				if r < 0 {
					o.log.Warn("campaign outcome not counted: the campaign's key holds another type than a hash",
						"channel", ch, "campaign", outs[i].Campaign, "outcome", outs[i].Kind)
				}
			}
			outs, ofs = outs[n:], ofs[n:]
		}
	}
	return failed, nil
}

// knownChannels and kinds bound the labels of pacer_webhook_events_applied_total:
// a record someone else wrote to an events topic may say anything.
var (
	knownChannels = map[string]bool{"whatsapp": true, "sendgrid": true, "apns": true, "fcm": true}
	kinds         = map[string]bool{"sent": true, "delivered": true, "read": true, "failed": true, "processed": true, "deferred": true,
		"bounce": true, "dropped": true, "spamreport": true, "unsubscribe": true, "group_unsubscribe": true,
		"open": true, "click": true, "group_resubscribe": true, "tier": true, "quality": true,
		KindSuppress: true, KindUnsuppress: true}
)

// applyNumbers records the pacing key of each display number a status
// event names (its metadata), once per pair and process.
func (o *Outcomes) applyNumbers(ctx context.Context, evs []Event) error {
	if o.portfolios == nil {
		return nil
	}
	for _, ev := range evs {
		if ev.Channel != "whatsapp" || ev.Number == "" || ev.Key == "" || ev.Kind == "quality" {
			continue
		}
		o.numbersMu.Lock()
		known := o.numbers[ev.Number] == ev.Key
		o.numbersMu.Unlock()
		if known {
			continue
		}
		if err := o.portfolios.SetNumber(ctx, ev.Channel, ev.Number, ev.Key); err != nil {
			return fmt.Errorf("webhook: %w", err)
		}
		o.numbersMu.Lock()
		if o.numbers == nil {
			o.numbers = map[string]string{}
		}
		o.numbers[ev.Number] = ev.Key
		o.numbersMu.Unlock()
	}
	return nil
}

// applyTier applies one "tier" event: the tier becomes that of the
// portfolio of its account (business_capability_update) or of its display
// number (phone_number_quality_update, [Outcomes.WithPortfolios]), which
// every replica's guard reads at its next admission. One that Pacer
// cannot place is logged (once per display number and process for a
// number's) and changes nothing.
func (o *Outcomes) applyTier(ctx context.Context, ev Event) error {
	tier := portfolio.TierString(ev.Tier)
	if ev.Number == "" {
		p, ok, err := o.portfolios.OfAccount(ctx, ev.Channel, ev.Account)
		if err == nil && ok {
			err = o.portfolios.SetTier(ctx, ev.Channel, p, ev.Tier)
		}
		if err != nil {
			return fmt.Errorf("webhook: apply the tier of account %s: %w", ev.Account, err)
		}
		if !ok {
			o.log.Warn("messaging-limit tier announced for an account without a portfolio; `pacer portfolio set --account` names it",
				"account", ev.Account, "tier", tier)
			return nil
		}
		o.log.Info("messaging-limit tier applied", "account", ev.Account, "portfolio", p, "tier", tier)
		return nil
	}
	p, ok, err := o.portfolioOfNumber(ctx, ev.Channel, ev.Number, ev.Account)
	if err == nil && ok {
		err = o.portfolios.SetTier(ctx, ev.Channel, p, ev.Tier)
	}
	if err != nil {
		return fmt.Errorf("webhook: apply the tier of display number %s: %w", ev.Number, err)
	}
	o.numbersMu.Lock()
	logged := o.unplaced[ev.Number]
	if ok {
		delete(o.unplaced, ev.Number)
	} else if !logged {
		if o.unplaced == nil {
			o.unplaced = map[string]bool{}
		}
		o.unplaced[ev.Number] = true
	}
	o.numbersMu.Unlock()
	switch {
	case ok:
		o.log.Info("messaging-limit tier applied", "number", ev.Number, "account", ev.Account, "portfolio", p, "tier", tier)
	case !logged:
		o.log.Warn("messaging-limit tier announced for a display number without a portfolio, not applied (logged once per number); "+
			"`pacer portfolio set --key` (its phone-number ID) or `--account` names it",
			"number", ev.Number, "account", ev.Account, "tier", tier)
	}
	return nil
}

// portfolioOfNumber returns the portfolio of channel's display number
// number: that of the pacing key the status webhooks named beside it
// (portfolio.Store.KeyOfNumber, then Of), else that of its account, as a
// quality event is placed; ok is false when neither has one.
func (o *Outcomes) portfolioOfNumber(ctx context.Context, channel, number, account string) (p string, ok bool, err error) {
	key, known, err := o.portfolios.KeyOfNumber(ctx, channel, number)
	if err != nil {
		return "", false, err
	}
	if known {
		if p, ok, err := o.portfolios.Of(ctx, channel, key); err != nil || ok {
			return p, ok, err
		}
	}
	return o.portfolios.OfAccount(ctx, channel, account)
}

// applyQuality applies one phone_number_quality_update: a throughput
// upgrade raises its number's per-key limit (WithLimits), and the event
// becomes the quality of the account's portfolio, pausing or resuming its
// marketing (WithQualityPause). A number or account Pacer cannot place is
// logged and skipped.
func (o *Outcomes) applyQuality(ctx context.Context, ev Event) error {
	if ev.Quality == portfolio.ThroughputUpgrade && o.limits != nil {
		key, ok, err := o.portfolios.KeyOfNumber(ctx, ev.Channel, ev.Number)
		if err != nil {
			return fmt.Errorf("webhook: apply the throughput upgrade of %s: %w", ev.Number, err)
		}
		if !ok {
			o.log.Warn("throughput upgrade of a display number no status webhook has named yet; set its limit with `pacer limit set`",
				"number", ev.Number, "rate", UpgradedThroughput)
		} else {
			old, had, err := o.limits.Limit(ctx, ev.Channel, key)
			if err != nil && !errors.Is(err, control.ErrInvalid) {
				return fmt.Errorf("webhook: apply the throughput upgrade of %s: %w", key, err)
			}
			l := control.KeyLimit{Key: key, PerSecond: UpgradedThroughput}
			if had {
				l.Burst = old.Burst
			}
			if _, _, err := o.limits.SetLimit(ctx, ev.Channel, l); err != nil {
				return fmt.Errorf("webhook: apply the throughput upgrade of %s: %w", key, err)
			}
			o.log.Info("throughput upgrade applied: the key's limit is raised", "key", key, "rate", l.PerSecond, "burst", l.Burst)
		}
	}
	p, ok, err := o.portfolios.OfAccount(ctx, ev.Channel, ev.Account)
	if err != nil {
		return fmt.Errorf("webhook: apply the quality of account %s: %w", ev.Account, err)
	}
	if !ok {
		o.log.Warn("quality event of an account without a portfolio; `pacer portfolio set --account` names it",
			"account", ev.Account, "event", ev.Quality)
		return nil
	}
	if err := o.portfolios.SetQuality(ctx, ev.Channel, p, ev.Quality, ev.At, o.qualityPause); err != nil {
		return fmt.Errorf("webhook: apply the quality of account %s: %w", ev.Account, err)
	}
	switch {
	case portfolio.QualityDowngrade(ev.Quality) && o.qualityPause:
		o.log.Warn("quality downgrade: the portfolio's marketing is paused until `pacer portfolio resume` or an upgrade",
			"account", ev.Account, "portfolio", p, "event", ev.Quality, "number", ev.Number)
	default:
		o.log.Info("quality event applied", "account", ev.Account, "portfolio", p, "event", ev.Quality, "number", ev.Number)
	}
	return nil
}

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
// is not an Event is logged and skipped. With WithLedger it looks at
// the waiting sent events every second ([Outcomes.ResolvePending]).
func (o *Outcomes) Run(ctx context.Context, kc *kgo.Client) error {
	if o.resolve != nil {
		go tick.Every(ctx, time.Second, func(time.Time) {
			if err := o.ResolvePending(ctx); err != nil && ctx.Err() == nil {
				o.log.Warn("waiting sent events not resolved; trying again in 1s", "err", err)
			}
		})
	}
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
