package webhook

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/pacerhq/pacer/channels"
	"github.com/pacerhq/pacer/pacer/portfolio"
	"github.com/pacerhq/pacer/pacer/suppress"
)

// whatsappSigned reports whether header (X-Hub-Signature-256) is
// "sha256=<hex HMAC-SHA256(secret, body)>", compared in constant time.
// The second result is false when header is missing or not of that shape.
func whatsappSigned(secret []byte, header string, body []byte) (ok, present bool) {
	hexSig, found := strings.CutPrefix(header, "sha256=")
	if !found {
		return false, header != ""
	}
	sig, err := hex.DecodeString(hexSig)
	if err != nil {
		return false, true
	}
	mac := hmac.New(sha256.New, secret)
	mac.Write(body)
	return hmac.Equal(sig, mac.Sum(nil)), true
}

// WhatsAppSignature returns the X-Hub-Signature-256 value Meta sends for
// body signed with the app secret: "sha256=<hex HMAC-SHA256>".
func WhatsAppSignature(secret, body []byte) string {
	mac := hmac.New(sha256.New, secret)
	mac.Write(body)
	return "sha256=" + hex.EncodeToString(mac.Sum(nil))
}

// waPayload is the part of a Cloud API webhook this package reads.
type waPayload struct {
	Object string `json:"object"`
	Entry  []struct {
		ID      string `json:"id"` // the WhatsApp Business Account ID
		Time    int64  `json:"time"`
		Changes []struct {
			Field string `json:"field"`
			Value struct {
				// business_capability_update: a number of recipients (2000;
				// -1: unlimited) or a tier name (TIER_250 ... TIER_UNLIMITED);
				// phone_number_quality_update: the owning portfolio's
				// messaging limit, a tier name
				MaxDailyConversationsPerBusiness json.RawMessage `json:"max_daily_conversations_per_business"`
				// phone_number_quality_update: the number's messaging limit
				// or throughput level, a tier name (deprecated by Meta)
				CurrentLimit json.RawMessage `json:"current_limit"`
				// phone_number_quality_update: the number and its event
				DisplayPhoneNumber string `json:"display_phone_number"`
				Event              string `json:"event"`
				Metadata           struct {
					PhoneNumberID      string `json:"phone_number_id"`
					DisplayPhoneNumber string `json:"display_phone_number"`
				} `json:"metadata"`
				Statuses []struct {
					ID          string `json:"id"`
					Status      string `json:"status"`
					Timestamp   string `json:"timestamp"`
					RecipientID string `json:"recipient_id"`
					Callback    string `json:"biz_opaque_callback_data"`
					Errors      []struct {
						Code int `json:"code"`
					} `json:"errors"`
				} `json:"statuses"`
			} `json:"value"`
		} `json:"changes"`
	} `json:"entry"`
}

var waStatuses = map[string]bool{"sent": true, "delivered": true, "read": true, "failed": true}

// parseWhatsApp returns the events of a Cloud API webhook body, or an
// error naming the first field at fault: one per message status, one
// "tier" per business_capability_update (of its account), and per
// phone_number_quality_update one "quality" for a quality or throughput
// event (FLAGGED, DOWNGRADE, UNFLAGGED, UPGRADE, THROUGHPUT_UPGRADE;
// others, such as ONBOARDING, yield none) and one "tier" of its display
// number when it carries a messaging limit understood ([qualityTier]),
// whatever its event. A tier value not understood is skipped, the
// batch's other events kept. Other changes (incoming messages) yield no
// event.
func parseWhatsApp(body []byte) ([]Event, error) {
	var p waPayload
	if err := json.Unmarshal(body, &p); err != nil {
		return nil, fmt.Errorf("body: not a WhatsApp webhook: %w", err)
	}
	if p.Object != "whatsapp_business_account" {
		return nil, fmt.Errorf("object: %q, want \"whatsapp_business_account\"", p.Object)
	}
	var out []Event
	for i, e := range p.Entry {
		for j, c := range e.Changes {
			if raw := c.Value.MaxDailyConversationsPerBusiness; c.Field == "business_capability_update" && len(raw) > 0 && string(raw) != "null" {
				if e.ID == "" {
					return nil, fmt.Errorf("entry[%d].id: missing (the WhatsApp Business Account)", i)
				}
				tier, ok := capabilityTier(raw)
				if !ok {
					continue // a value Meta adds later: skipped, the batch's other events stored
				}
				out = append(out, Event{ID: "tier:" + e.ID + ":" + strconv.FormatInt(e.Time, 10) + ":" + portfolio.TierString(tier),
					Channel: "whatsapp", Kind: "tier", Account: e.ID, Tier: tier, At: time.Unix(e.Time, 0).UTC()})
				continue
			}
			if c.Field == "phone_number_quality_update" {
				v := c.Value
				quality := portfolio.QualityDowngrade(v.Event) || portfolio.QualityUpgrade(v.Event)
				tier, hasTier := qualityTier(v.MaxDailyConversationsPerBusiness, v.CurrentLimit)
				if !quality && !hasTier {
					continue // ONBOARDING without a limit, or an event Meta adds later: nothing to apply
				}
				if e.ID == "" {
					return nil, fmt.Errorf("entry[%d].id: missing (the WhatsApp Business Account)", i)
				}
				if v.DisplayPhoneNumber == "" {
					return nil, fmt.Errorf("entry[%d].changes[%d].value.display_phone_number: missing", i, j)
				}
				at, sec := time.Unix(e.Time, 0).UTC(), strconv.FormatInt(e.Time, 10)
				if quality {
					out = append(out, Event{ID: "quality:" + e.ID + ":" + v.DisplayPhoneNumber + ":" + sec + ":" + v.Event,
						Channel: "whatsapp", Kind: "quality", Account: e.ID, Number: v.DisplayPhoneNumber, Quality: v.Event, At: at})
				}
				if hasTier {
					out = append(out, Event{ID: "tier:" + e.ID + ":" + v.DisplayPhoneNumber + ":" + sec + ":" + portfolio.TierString(tier),
						Channel: "whatsapp", Kind: "tier", Account: e.ID, Number: v.DisplayPhoneNumber, Tier: tier, At: at})
				}
				continue
			}
			key := c.Value.Metadata.PhoneNumberID
			for k, s := range c.Value.Statuses {
				at := fmt.Sprintf("entry[%d].changes[%d].value.statuses[%d]", i, j, k)
				if key == "" {
					return nil, fmt.Errorf("entry[%d].changes[%d].value.metadata.phone_number_id: missing", i, j)
				}
				if s.ID == "" {
					return nil, fmt.Errorf("%s.id: missing", at)
				}
				if !waStatuses[s.Status] {
					// A status Meta adds later (deleted, warning, played...)
					// is skipped: refusing the batch would lose the failures
					// beside it to the provider's retries.
					continue
				}
				sec, err := strconv.ParseInt(s.Timestamp, 10, 64)
				if err != nil {
					return nil, fmt.Errorf("%s.timestamp: %q is not Unix seconds", at, s.Timestamp)
				}
				if s.RecipientID == "" {
					return nil, fmt.Errorf("%s.recipient_id: missing", at)
				}
				id, campaign := channels.ParseCallbackData(s.Callback)
				ev := Event{ID: s.ID + ":" + s.Status, Channel: "whatsapp", Key: key, Kind: s.Status, Message: id, Campaign: campaign,
					ProviderID: s.ID, At: time.Unix(sec, 0).UTC(), Recipients: waRecipients(s.RecipientID),
					Number: c.Value.Metadata.DisplayPhoneNumber}
				if len(s.Errors) > 0 {
					ev.Code = s.Errors[0].Code
				}
				out = append(out, ev)
			}
		}
	}
	return out, nil
}

// waRecipients is the hash of a WhatsApp recipient_id (a wa_id: digits,
// no "+"): [suppress.Hash] takes the envelope's "+15551234567" and this
// "15551234567" as one recipient.
func waRecipients(id string) []string {
	return []string{suppress.Hash(id)}
}

// waSender returns the one phone_number_id a webhook body names (digits
// only), or false when it names none, several, or one of another shape.
func waSender(body []byte) (string, bool) {
	var p waPayload
	if json.Unmarshal(body, &p) != nil {
		return "", false
	}
	id := ""
	for _, e := range p.Entry {
		for _, c := range e.Changes {
			v := c.Value.Metadata.PhoneNumberID
			if v == "" || strings.Trim(v, "0123456789") != "" || (id != "" && v != id) {
				return "", false
			}
			id = v
		}
	}
	return id, id != ""
}

// capabilityTier reads business_capability_update's
// max_daily_conversations_per_business: Meta's reference types it as an
// integer (2000; -1 for unlimited, as the per-phone field it replaces),
// and earlier payloads wrote a tier name ("TIER_2K"), so both are read
// ([portfolio.ParseTier]). ok is false for anything else.
func capabilityTier(raw json.RawMessage) (tier int, ok bool) {
	var s string
	if err := json.Unmarshal(raw, &s); err != nil {
		var n json.Number
		if err := json.Unmarshal(raw, &n); err != nil {
			return 0, false
		}
		if v, err := n.Int64(); err == nil && v < 0 {
			return portfolio.Unlimited, true
		}
		s = n.String()
	}
	t, err := portfolio.ParseTier(s)
	return t, err == nil
}

// qualityTier reads the messaging limit a phone_number_quality_update
// carries: max_daily_conversations_per_business (the owning business
// portfolio's limit) when the value has it, else current_limit (the
// number's limit or throughput level, which Meta's reference says is
// removed in February 2026 in favour of the former). Both are tier names
// (TIER_50, TIER_250, TIER_1K, TIER_2K, TIER_10K, TIER_100K,
// TIER_UNLIMITED), read as business_capability_update's are
// ([capabilityTier]); TIER_NOT_SET (a number that never sent) and any
// other value are not a limit: ok is false. old_limit, the limit before
// the change, is not read.
//
// Sources: developers.facebook.com/documentation/business-messaging/whatsapp/webhooks/reference/phone_number_quality_update
// (its example carries current_limit TIER_UNLIMITED, the throughput
// level, beside max_daily_conversations_per_business TIER_2K: the
// latter wins); TIER_1K as providers relaying the webhook list it
// (docs.wati.io/reference/phone-number-quality-update); docs/webhooks.md.
func qualityTier(maxDaily, current json.RawMessage) (tier int, ok bool) {
	raw := maxDaily
	if len(raw) == 0 || string(raw) == "null" {
		raw = current
	}
	if len(raw) == 0 || string(raw) == "null" {
		return 0, false
	}
	return capabilityTier(raw)
}
