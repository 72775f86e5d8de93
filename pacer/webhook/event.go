// Package webhook hears what providers report after the send: it receives
// their status webhooks (WhatsApp Cloud API statuses, SendGrid's Event
// Webhook), checks each request's signature, and produces its events to
// the channel's events topic (pacer.<channel>.events, [Topic]) as JSON
// [Event] records keyed by pacing key, answering 2xx only once Kafka
// acknowledged them, so that a provider retries whatever was not kept.
// [Outcomes] consumes those topics and applies what an event means: the
// suppressions of package suppress, portfolio tiers, each campaign's
// outcome counts (package control) and, given the idempotency ledger
// ([Outcomes.WithLedger]), the unknown outcomes its webhooks resolve and
// the events matched by the provider's message id alone.
//
// Sources: providers.md §8.2 (WhatsApp webhooks: GET verification,
// X-Hub-Signature-256, statuses[]) and §8.5 (SendGrid Event Webhook,
// ECDSA over timestamp + raw body).
package webhook

import (
	"strconv"
	"time"

	"github.com/pacerhq/pacer/pacer/control"
	"github.com/pacerhq/pacer/pacer/suppress"
)

// Topic is the events topic of channel: "pacer.<channel>.events".
func Topic(channel string) string { return "pacer." + channel + ".events" }

// Event is one provider event as the events topic carries it (JSON). No
// address or phone number is written: the recipient is named by its
// hashes ([suppress.Hash]).
type Event struct {
	// ID names the event for deduplication: "<wamid>:<status>" for
	// WhatsApp, sg_event_id for SendGrid (else "<sg_message_id>:<event>"),
	// "generic:<webhook-id>:<index>" for the platform's outcomes.
	ID      string `json:"id"`
	Channel string `json:"channel"`
	// Key is the pacing key: the phone-number ID (WhatsApp), the key the
	// webhook URL names (SendGrid), the outcome's key (generic route).
	Key string `json:"key"`
	// Kind is the provider's status or event name: sent, delivered, read,
	// failed (WhatsApp); processed, delivered, deferred, bounce, dropped,
	// spamreport, unsubscribe, group_unsubscribe (SendGrid); or an account
	// event's: tier (business_capability_update), quality
	// (phone_number_quality_update); or the platform's: suppress,
	// unsuppress ([KindSuppress], the generic route).
	Kind string `json:"kind"`
	// Message is the envelope id the send carried
	// (biz_opaque_callback_data, read by channels.ParseCallbackData;
	// custom_args.pacer_id); "" if absent.
	Message string `json:"message,omitempty"`
	// Campaign is the envelope's campaign the send carried
	// (biz_opaque_callback_data; custom_args.pacer_campaign); "" if absent
	// (a message of no campaign, or sent before campaigns were carried):
	// the event then counts in no campaign.
	Campaign string `json:"campaign,omitempty"`
	// Reason is a SendGrid bounce's type: "bounce" or "blocked"; a
	// platform suppress's reason (a [suppress.Reason]); "" else.
	Reason string `json:"reason,omitempty"`
	// Until is when a platform suppress ends; zero: until removed.
	Until time.Time `json:"until,omitzero"`
	// ProviderID is the provider's message id (wamid, sg_message_id).
	ProviderID string `json:"provider_id,omitempty"`
	// Recipients are the hashes the recipient may have been sent as: a
	// WhatsApp recipient_id is digits, the envelope's "to" may carry a
	// "+", so both are listed.
	Recipients []string `json:"recipients,omitempty"`
	// Code is the provider's error code (WhatsApp errors[0].code); 0 if none.
	Code int `json:"code,omitempty"`
	// At is when the provider saw the event (its timestamp, s precision).
	At time.Time `json:"at"`
	// Account is the provider account an account event names (Kinds
	// "tier" and "quality": the WhatsApp Business Account ID, the
	// webhook's entry id).
	Account string `json:"account,omitempty"`
	// Tier is Kind "tier"'s messaging limit: unique recipients per 24 h,
	// -1 unlimited (business_capability_update's
	// max_daily_conversations_per_business; phone_number_quality_update's
	// max_daily_conversations_per_business, else current_limit).
	Tier int `json:"tier,omitempty"`
	// Number is the business's own display phone number (digits) the
	// event names: Kind "quality"'s and a phone_number_quality_update
	// "tier"'s display_phone_number (a tier with a number applies to the
	// number's portfolio, one without to its account's), a status's
	// metadata.display_phone_number (which teaches the number's pacing
	// key, for the events that name only the number). Never a
	// recipient's.
	Number string `json:"number,omitempty"`
	// Quality is Kind "quality"'s phone_number_quality_update event:
	// FLAGGED, DOWNGRADE, UNFLAGGED, UPGRADE or THROUGHPUT_UPGRADE.
	Quality string `json:"quality,omitempty"`
}

// suppression returns the reason ev suppresses its recipient for, or
// false: WhatsApp failed with 131026 (undeliverable) or 131049 (marketing
// limit); SendGrid bounce, dropped, spamreport, unsubscribe and
// group_unsubscribe.
func (ev Event) suppression() (suppress.Reason, bool) {
	switch ev.Channel {
	case "whatsapp":
		if ev.Kind != "failed" {
			return "", false
		}
		switch ev.Code {
		case 131026:
			return suppress.Undeliverable, true
		case 131049:
			return suppress.MarketingLimit, true
		}
	case "sendgrid":
		switch ev.Kind {
		case "bounce":
			return suppress.Bounce, true
		case "dropped":
			return suppress.Dropped, true
		case "spamreport":
			return suppress.SpamReport, true
		case "unsubscribe", "group_unsubscribe":
			return suppress.Unsubscribe, true
		}
	}
	return "", false
}

// outcomes returns what ev counts in its campaign (control.Outcome), none
// when it names no envelope id or no campaign:
//
//   - WhatsApp delivered: device_delivered; read: device_delivered and
//     read (a read message was delivered, and a read that arrives before
//     its delivered, or without one, counts it once); failed:
//     failed:<error code> ("unknown" without one);
//   - SendGrid delivered: device_delivered; open: device_delivered and
//     read; dropped: failed:dropped; bounce: bounced:<type> (bounce or
//     blocked; bounce when absent);
//   - and suppressed:<reason> for an event that suppresses its recipient
//     ([Event] suppression).
//
// sent, processed, deferred and the others count nothing: "accepted" is
// the pacer's own delivered count.
func (ev Event) outcomes() []control.Outcome {
	if ev.Message == "" || ev.Campaign == "" {
		return nil
	}
	o := func(kind, reason string) control.Outcome {
		return control.Outcome{ID: ev.Message, Campaign: ev.Campaign, Kind: kind, Reason: reason}
	}
	var out []control.Outcome
	switch ev.Channel + "/" + ev.Kind {
	case "whatsapp/delivered", "sendgrid/delivered":
		out = append(out, o(control.DeviceDelivered, ""))
	case "whatsapp/read", "sendgrid/open":
		out = append(out, o(control.DeviceDelivered, ""), o(control.Read, ""))
	case "whatsapp/failed":
		code := "unknown"
		if ev.Code != 0 {
			code = strconv.Itoa(ev.Code)
		}
		out = append(out, o(control.Failed, code))
	case "sendgrid/dropped":
		out = append(out, o(control.Failed, "dropped"))
	case "sendgrid/bounce":
		reason := ev.Reason
		if reason != "blocked" {
			reason = "bounce"
		}
		out = append(out, o(control.Bounced, reason))
	}
	if r, ok := ev.suppression(); ok {
		out = append(out, o(control.Suppressed, string(r)))
	}
	return out
}
