package webhook

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/pacerhq/pacer/pacer/control"
)

// Ledger is what [Outcomes] reads and writes of the idempotency ledger:
// package ledger's *Ledger, which cmd/pacer passes to
// [Outcomes.WithLedger]. Package webhook does not import package ledger
// (internal/deptest: an application never takes a claim); it only names
// these methods of it.
type Ledger interface {
	// Unsettled reports, per id of ids (all of channel, keys[i] the
	// pacing key of ids[i]), whether the ledger holds it claimed or
	// dead-lettered; pipelined, one round trip.
	Unsettled(ctx context.Context, channel string, keys, ids []string) ([]bool, error)
	// ByProvider returns the envelope id and campaign whose delivered
	// mark kept the provider's message id providerID; ok false if none.
	ByProvider(ctx context.Context, channel, key, providerID string) (id, campaign string, ok bool, err error)
	// Outcome returns "delivered", "claimed", "dead-lettered:<reason>"
	// or "none".
	Outcome(ctx context.Context, channel, key, id string) (string, error)
	// DeliveredIn marks id delivered, keeping providerID and campaign.
	DeliveredIn(ctx context.Context, channel, key, id, providerID, campaign string) error
}

// unknownOutcome is the ledger's state of an id dead-lettered because its
// send's answer was lost (the consumer's DLQ reason unknown-outcome).
const unknownOutcome = "dead-lettered:unknown-outcome"

// maxPending bounds the sent events of claimed ids waiting for their
// claim to become an outcome: about 200 bytes each, 20 MB at most.
const maxPending = 100_000

// resolver resolves unknown outcomes (see [Outcomes.WithLedger]).
type resolver struct {
	ledger Ledger
	ttl    time.Duration // how long a claimed id's event waits: the ledger's TTL

	mu      sync.Mutex
	pending map[pendingID]pendingEvent

	// resolving makes one resolution at a time, Apply's or
	// ResolvePending's: a read of the ledger and its mark are not
	// interleaved with another's of the same id (the events of a pacing
	// key come to one process: its events topic partition's).
	resolving sync.Mutex
}

type pendingID struct{ channel, key, id string }

type pendingEvent struct {
	providerID, campaign string
	until                time.Time
}

// WithLedger makes o match events by the provider's message id and
// resolve unknown outcomes with l, the idempotency ledger whose entries
// are kept for ttl:
//
//   - an event that names no envelope id, only the provider's message id
//     (an older Pacer's send, a provider that dropped the custom
//     arguments), takes the envelope id and campaign the delivered mark of
//     that provider id kept (ledger.Ledger.ByProvider), while the ledger
//     keeps it;
//   - a message the ledger holds as dead-lettered unknown-outcome (its
//     send's answer was lost) whose webhook says it was sent (WhatsApp
//     sent, delivered or read; SendGrid processed, delivered or open) is
//     counted delivered in its campaign and taken out of its
//     dlq:unknown-outcome count, once (control.Resolved), then marked
//     delivered in the ledger, so neither a replay of its DLQ copy nor a
//     copy Kafka delivers again is sent a second time. One still claimed
//     (its process died mid-send, and no consumer has dead-lettered it
//     yet; or a send in flight) waits in memory, at most ttl and
//     [maxPending] of them, looked at again every second by Run
//     ([Outcomes.ResolvePending]): dead-lettered unknown-outcome, it is
//     resolved; delivered by its sender, it is dropped. A webhook process
//     that restarts forgets them;
//   - a failed event of such a message is counted failed:<code> with its
//     campaign as any failed event is, and its DLQ record stays.
//
// pacer_webhook_unknown_resolved_total counts them. It returns o.
func (o *Outcomes) WithLedger(l Ledger, ttl time.Duration) *Outcomes {
	o.resolve = &resolver{ledger: l, ttl: ttl, pending: map[pendingID]pendingEvent{}}
	return o
}

// match fills in the envelope id and campaign of the events of evs that
// name only the provider's message id, from the ledger. It returns evs,
// copied when it changes one.
func (o *Outcomes) match(ctx context.Context, evs []Event) ([]Event, error) {
	if o.resolve == nil {
		return evs, nil
	}
	copied := false
	for i, ev := range evs {
		if ev.Message != "" || ev.ProviderID == "" || ev.Key == "" || ev.Kind == "tier" || ev.Kind == "quality" {
			continue
		}
		id, campaign, ok, err := o.resolve.ledger.ByProvider(ctx, ev.Channel, ev.Key, sentAs(ev))
		if err != nil {
			return evs, fmt.Errorf("webhook: match an event by its provider id: %w", err)
		}
		o.m.matched.WithLabelValues(label(ev.Channel, knownChannels), strconv.FormatBool(ok)).Inc()
		if !ok {
			continue
		}
		if !copied {
			evs, copied = append([]Event(nil), evs...), true
		}
		evs[i].Message = id
		if evs[i].Campaign == "" {
			evs[i].Campaign = campaign
		}
	}
	return evs, nil
}

// sentAs is the provider id the send's answer carried, as its delivered
// mark keeps it, of ev: the wamid; for SendGrid the X-Message-Id, which
// an event's sg_message_id begins with, up to its first "." ("msg_id LIKE
// '<X-Message-ID>%'",
// https://support.sendgrid.com/hc/en-us/articles/35804743679259-How-To-Filter-results-with-Activity-Feed-API-for-X-Message-ID).
func sentAs(ev Event) string {
	if ev.Channel == "sendgrid" {
		id, _, _ := strings.Cut(ev.ProviderID, ".")
		return id
	}
	return ev.ProviderID
}

// sentKinds are the events that say the provider took the message.
var sentKinds = map[string]bool{
	"whatsapp/sent": true, "whatsapp/delivered": true, "whatsapp/read": true,
	"sendgrid/processed": true, "sendgrid/delivered": true, "sendgrid/open": true,
}

// resolveUnknown resolves the unknown outcomes evs name (see
// [Outcomes.WithLedger]); failed are the failed outcomes count counted now.
func (o *Outcomes) resolveUnknown(ctx context.Context, evs []Event, failed []failure) error {
	if o.resolve == nil {
		return nil
	}
	// Failures first: they were counted now, by this very batch.
	for _, f := range failed {
		ev := f.event
		st, err := o.resolve.ledger.Outcome(ctx, ev.Channel, ev.Key, ev.Message)
		if err != nil {
			return fmt.Errorf("webhook: read the outcome of %s: %w", ev.Message, err)
		}
		if st == unknownOutcome || st == "claimed" {
			o.m.resolved.WithLabelValues(label(ev.Channel, knownChannels), "failed").Inc()
			o.log.Info("unknown outcome resolved: the provider says the message failed; its DLQ record stays",
				"channel", ev.Channel, "key", ev.Key, "message", ev.Message, "campaign", ev.Campaign, "reason", f.reason)
		}
	}
	// The ids the provider says it took, by channel, read in one round
	// trip each: only those neither delivered nor unknown to the ledger
	// (claimed, dead-lettered) are read again, one by one.
	done := map[pendingID]bool{}
	var ks []pendingID
	var ps []pendingEvent
	for _, ev := range evs {
		k := pendingID{ev.Channel, ev.Key, ev.Message}
		if ev.Message == "" || ev.Key == "" || !sentKinds[ev.Channel+"/"+ev.Kind] || done[k] {
			continue
		}
		done[k] = true
		ks, ps = append(ks, k), append(ps, pendingEvent{providerID: ev.ProviderID, campaign: ev.Campaign})
	}
	for len(ks) > 0 {
		ch := ks[0].channel
		var keys, ids []string
		var idx []int
		for i, k := range ks {
			if k.channel == ch {
				keys, ids, idx = append(keys, k.key), append(ids, k.id), append(idx, i)
			}
		}
		open, err := o.resolve.ledger.Unsettled(ctx, ch, keys, ids)
		if err != nil {
			return fmt.Errorf("webhook: read %d ids of %s in the ledger: %w", len(ids), ch, err)
		}
		for j, i := range idx {
			if !open[j] {
				continue
			}
			if err := o.resolveSent(ctx, ks[i], ps[i], true); err != nil {
				return err
			}
		}
		var restK []pendingID
		var restP []pendingEvent
		for i, k := range ks {
			if k.channel != ch {
				restK, restP = append(restK, k), append(restP, ps[i])
			}
		}
		ks, ps = restK, restP
	}
	return nil
}

// resolveSent resolves id k, which the provider says it took: counted
// and marked delivered if dead-lettered unknown-outcome, kept waiting
// (when wait) if claimed.
func (o *Outcomes) resolveSent(ctx context.Context, k pendingID, p pendingEvent, wait bool) error {
	r := o.resolve
	r.resolving.Lock()
	defer r.resolving.Unlock()
	st, err := r.ledger.Outcome(ctx, k.channel, k.key, k.id)
	if err != nil {
		return fmt.Errorf("webhook: read the outcome of %s: %w", k.id, err)
	}
	switch st {
	case unknownOutcome:
		// Counted first, then marked: counted once per message
		// (control.Resolved), a crash between the two counts nothing the
		// second time and marks it then.
		if p.campaign != "" && o.counts != nil {
			if _, err := o.counts.CountOutcomes(ctx, k.channel, []control.Outcome{{ID: k.id, Campaign: p.campaign, Kind: control.Resolved}}); err != nil {
				return fmt.Errorf("webhook: count the resolved outcome of %s: %w", k.id, err)
			}
		}
		if err := r.ledger.DeliveredIn(ctx, k.channel, k.key, k.id, p.providerID, p.campaign); err != nil {
			return fmt.Errorf("webhook: resolve %s: %w", k.id, err)
		}
		o.m.resolved.WithLabelValues(label(k.channel, knownChannels), "delivered").Inc()
		o.log.Info("unknown outcome resolved: the provider says the message was sent; marked delivered",
			"channel", k.channel, "key", k.key, "message", k.id, "campaign", p.campaign)
		r.drop(k)
	case "claimed":
		if wait {
			r.wait(k, p, o)
		}
	default:
		r.drop(k)
	}
	return nil
}

// wait keeps k's event until its claim becomes an outcome, or the
// ledger's TTL passed.
func (r *resolver) wait(k pendingID, p pendingEvent, o *Outcomes) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if _, ok := r.pending[k]; !ok && len(r.pending) >= maxPending {
		o.m.resolved.WithLabelValues(label(k.channel, knownChannels), "dropped").Inc()
		return
	}
	p.until = time.Now().Add(r.ttl)
	r.pending[k] = p
}

func (r *resolver) drop(k pendingID) {
	r.mu.Lock()
	delete(r.pending, k)
	r.mu.Unlock()
}

// ResolvePending looks again at the sent events of ids that were still
// claimed when they came ([Outcomes.WithLedger]): those now dead-lettered
// unknown-outcome are resolved, those an outcome was recorded for are
// dropped, those claimed past the ledger's TTL are dropped and counted
// unresolved. Run calls it every second. The first error is returned;
// the ids it left wait for the next call.
func (o *Outcomes) ResolvePending(ctx context.Context) error {
	r := o.resolve
	if r == nil {
		return nil
	}
	r.mu.Lock()
	ks := make([]pendingID, 0, len(r.pending))
	ps := make([]pendingEvent, 0, len(r.pending))
	now := time.Now()
	for k, p := range r.pending {
		if now.After(p.until) {
			delete(r.pending, k)
			o.m.resolved.WithLabelValues(label(k.channel, knownChannels), "unresolved").Inc()
			o.log.Warn("a sent event's message stayed claimed for the ledger's TTL; its outcome is left unknown",
				"channel", k.channel, "key", k.key, "message", k.id)
			continue
		}
		ks, ps = append(ks, k), append(ps, p)
	}
	r.mu.Unlock()
	for i, k := range ks {
		if err := o.resolveSent(ctx, k, ps[i], false); err != nil {
			return err
		}
	}
	return nil
}

// Pending returns how many sent events of claimed ids wait
// ([Outcomes.ResolvePending]).
func (o *Outcomes) Pending() int {
	if o.resolve == nil {
		return 0
	}
	o.resolve.mu.Lock()
	defer o.resolve.mu.Unlock()
	return len(o.resolve.pending)
}
