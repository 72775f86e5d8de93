package control

import (
	"context"
	"fmt"
	"time"

	"github.com/pacerhq/pacer/internal/wire"
	"github.com/pacerhq/pacer/lua"
	"github.com/redis/go-redis/v9"
)

// Outcome kinds: the names a message's outcome is counted once under
// (see [Outcome]).
const (
	// DeviceDelivered: the provider reports the message on the
	// recipient's device (WhatsApp delivered or read) or at the
	// recipient's mail server (SendGrid delivered or open).
	DeviceDelivered = "device_delivered"
	// Read: the recipient read it (WhatsApp read, SendGrid open).
	Read = "read"
	// Failed: it failed after the provider accepted it (WhatsApp failed,
	// SendGrid dropped); the reason is the provider's code.
	Failed = "failed"
	// Bounced: the recipient's server refused it (SendGrid bounce); the
	// reason is the bounce type (bounce, blocked).
	Bounced = "bounced"
	// Suppressed: its outcome suppressed the recipient; the reason is the
	// suppression's (undeliverable, bounce, unsubscribe...).
	Suppressed = "suppressed"
	// Resolved: its send's answer was lost and it was dead-lettered as
	// unknown-outcome, then the provider's webhook said it was sent:
	// counted once as delivered ("delivered" up one) and taken out of
	// "dlq:unknown-outcome" (down one). No reason.
	Resolved = "resolved"
)

// UnknownOutcome is the campaign counter of records dead-lettered because
// their send's outcome is unknown (the consumer's dlq:<reason> count), the
// counter a [Resolved] outcome takes one from.
const UnknownOutcome = "dlq:unknown-outcome"

// OutcomeTTL is how long Redis remembers the outcome kinds counted for a
// message, after its last new one: a duplicate within it counts nothing.
// It outlasts the providers' retries of a webhook (Meta's for up to 7
// days as reported by third parties, SendGrid's for up to 24 h,
// providers.md §8.5; sources in docs/webhooks.md) with a day to spare.
// Each message costs Redis one small hash for that long.
const OutcomeTTL = 8 * 24 * time.Hour

// Outcome is one outcome of one message to count in its campaign: the
// campaign hash's counter Kind (device_delivered, read) or
// "<Kind>:<Reason>" (failed, bounced, suppressed) goes up by one, once
// per (ID, Kind) within [OutcomeTTL].
type Outcome struct {
	ID       string // the envelope id; required
	Campaign string // required
	Kind     string // DeviceDelivered, Read, Failed, Bounced, Suppressed or Resolved
	Reason   string // required for Failed, Bounced and Suppressed; "" otherwise
}

// field is o's counter in the campaign's hash.
func (o Outcome) field() string {
	if o.Kind == Resolved {
		return "delivered"
	}
	if o.Reason == "" {
		return o.Kind
	}
	return o.Kind + ":" + o.Reason
}

// validate names what is wrong with o.
func (o Outcome) validate() error {
	switch {
	case o.ID == "":
		return fmt.Errorf("%w: outcome: id is required", ErrInvalid)
	case o.Campaign == "":
		return fmt.Errorf("%w: outcome of %s: campaign is required", ErrInvalid, o.ID)
	}
	switch o.Kind {
	case DeviceDelivered, Read, Resolved:
		if o.Reason != "" {
			return fmt.Errorf("%w: outcome %s of %s: takes no reason (%q)", ErrInvalid, o.Kind, o.ID, o.Reason)
		}
	case Failed, Bounced, Suppressed:
		if o.Reason == "" {
			return fmt.Errorf("%w: outcome %s of %s: reason is required", ErrInvalid, o.Kind, o.ID)
		}
	default:
		return fmt.Errorf("%w: outcome of %s: kind %q (device_delivered, read, failed, bounced, suppressed or resolved)", ErrInvalid, o.ID, o.Kind)
	}
	return nil
}

// CountOutcomes counts outs of channel in their campaigns, each once per
// (ID, Kind) within [OutcomeTTL] (outcome_count.lua): one call in the
// channel's slot, one round trip. It returns, per outcome in order, 1
// counted now, 0 counted before (a duplicate), -1 refused (its campaign's
// key holds another type than a hash). An invalid outcome is an
// [ErrInvalid] naming it, and nothing is counted; a Redis error means
// some or none were counted: counting the same outcomes again adds only
// those that were not.
func (s *Store) CountOutcomes(ctx context.Context, channel string, outs []Outcome) ([]int, error) {
	if len(outs) == 0 {
		return nil, nil
	}
	keys := make([]string, 0, 1+2*len(outs))
	keys = append(keys, s.keys.Campaigns(channel))
	argv := make([]any, 0, 3+4*len(outs))
	argv = append(argv, OutcomeTTL.Milliseconds(), time.Now().UnixMilli(), MaxIndexed)
	for _, o := range outs {
		if err := o.validate(); err != nil {
			return nil, err
		}
		keys = append(keys, s.keys.Outcomes(channel, o.ID), s.keys.Campaign(channel, o.Campaign))
		undo := ""
		if o.Kind == Resolved {
			undo = UnknownOutcome
		}
		argv = append(argv, o.Campaign, o.Kind, o.field(), undo)
	}
	v, err := s.rdb.EvalSha(ctx, outcomeScript.Hash(), keys, argv...).Result()
	if wire.NoScript(err) {
		v, err = s.rdb.Eval(ctx, lua.OutcomeCount, keys, argv...).Result()
	}
	if err != nil {
		return nil, fmt.Errorf("control: count %d outcomes: %w", len(outs), err)
	}
	reply, _ := v.([]any)
	if len(reply) != len(outs) {
		return nil, fmt.Errorf("control: count %d outcomes: unexpected reply %v", len(outs), v)
	}
	got := make([]int, len(outs))
	for i, r := range reply {
		n, ok := r.(int64)
		if !ok || n < -1 || n > 1 {
			return nil, fmt.Errorf("control: count %d outcomes: unexpected reply %v", len(outs), v)
		}
		got[i] = int(n)
	}
	return got, nil
}

// outcomeScript counts outcomes once per message and kind (outcome_count.lua).
var outcomeScript = redis.NewScript(lua.OutcomeCount)
