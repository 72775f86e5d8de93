package webhook

// The generic route: outcomes the platform learns elsewhere (an opt-out in
// its CRM, its own device-token feedback), posted by the platform itself
// and signed with the Standard Webhooks scheme.
//
// Source: the Standard Webhooks specification 1.0.0,
// github.com/standard-webhooks/standard-webhooks/blob/main/spec/standard-webhooks.md
// ("Verifying webhook authenticity"; www.standardwebhooks.com): headers
// webhook-id, webhook-timestamp (Unix seconds) and webhook-signature (a
// space-delimited list of "v1,<base64 HMAC-SHA256>" over
// "<webhook-id>.<webhook-timestamp>.<raw body>"), secrets "whsec_<base64>"
// of 24 to 64 bytes, compared in constant time, a timestamp within a
// tolerance of the receiver's clock (5 minutes in the project's own
// libraries), webhook-id the idempotency key.

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"reflect"
	"strconv"
	"strings"
	"time"

	standardwebhooks "github.com/standard-webhooks/standard-webhooks/libraries/go"

	"github.com/pacerhq/pacer/pacer/suppress"
)

// GenericMaxAge is how far a generic request's webhook-timestamp may be
// from the receiver's clock, either way (the Standard Webhooks
// libraries' tolerance); further is refused 401 stale.
const GenericMaxAge = 5 * time.Minute

// MaxGenericOutcomes is the most outcomes one generic request carries
// (400 beyond): one Kafka record each.
const MaxGenericOutcomes = 1000

// GenericChannels are the channels a generic outcome may name; their
// events topics must exist where the generic route is served.
var GenericChannels = []string{"whatsapp", "apns", "fcm", "sendgrid"}

// Kinds of a generic outcome's [Event].
const (
	KindSuppress   = "suppress"
	KindUnsuppress = "unsuppress"
)

// ParseGenericSecrets reads the secrets of the generic route: one or
// more "whsec_<base64>" separated by white space (several while a secret
// is rotated: a signature by any of them is accepted), each of 24 to 64
// bytes once decoded, as the Standard Webhooks specification has them.
// It returns the HMAC keys; an error names the secret by its position,
// never its value.
func ParseGenericSecrets(s string) ([][]byte, error) {
	fields := strings.Fields(s)
	if len(fields) == 0 {
		return nil, errors.New("no secret")
	}
	keys := make([][]byte, len(fields))
	for i, f := range fields {
		b64, ok := strings.CutPrefix(f, "whsec_")
		key, err := base64.StdEncoding.DecodeString(b64)
		switch {
		case !ok || err != nil:
			return nil, fmt.Errorf("secret %d of %d: not whsec_ followed by base64", i+1, len(fields))
		case len(key) < 24 || len(key) > 64:
			return nil, fmt.Errorf("secret %d of %d: %d bytes once decoded, want 24 to 64", i+1, len(fields), len(key))
		}
		keys[i] = key
	}
	return keys, nil
}

// GenericSignature returns the webhook-signature value of body sent as
// webhook id at Unix second ts, signed with HMAC key key:
// "v1,<base64 HMAC-SHA256(key, id.ts.body)>"; "" for an empty key.
func GenericSignature(key []byte, id string, ts int64, body []byte) string {
	wh, err := standardwebhooks.NewWebhookRaw(key)
	if err != nil {
		return ""
	}
	sig, _ := wh.Sign(id, time.Unix(ts, 0), body)
	return sig
}

// generic answers POST /webhook/generic: 401 unsigned (a header missing),
// bad-signature (no signature matches a configured secret) or stale
// (webhook-timestamp not Unix seconds, or over [GenericMaxAge] away), 400
// naming the field at fault, else the outcomes produced to their
// channels' events topics and 200 once Kafka acknowledged them all.
//
// The signature is checked by the Standard Webhooks library without its
// own timestamp check (VerifyIgnoringTimestamp), and the age here: the
// library's reads time.Now, not Config.Now, and comes before the
// signature, so an unsigned old request would count as stale rather than
// bad-signature, unlike the SendGrid route.
func (s *Server) generic(w http.ResponseWriter, r *http.Request) {
	const ch = "generic"
	body, ok := s.read(w, r, ch)
	if !ok {
		return
	}
	id, ts := r.Header.Get(standardwebhooks.HeaderWebhookID), r.Header.Get(standardwebhooks.HeaderWebhookTimestamp)
	if id == "" || ts == "" || r.Header.Get(standardwebhooks.HeaderWebhookSignature) == "" {
		s.refuse(w, ch, "unsigned", http.StatusUnauthorized, "webhook-id, webhook-timestamp and webhook-signature are all required (Standard Webhooks)")
		return
	}
	if err := checkWebhookID(id); err != "" {
		s.refuse(w, ch, "malformed", http.StatusBadRequest, "webhook-id: "+err)
		return
	}
	sec, err := strconv.ParseInt(ts, 10, 64)
	if err != nil {
		s.refuse(w, ch, "stale", http.StatusUnauthorized, "webhook-timestamp is not Unix seconds")
		return
	}
	if !s.genericSigned(r.Header, body) {
		s.refuse(w, ch, "bad-signature", http.StatusUnauthorized, "no signature of webhook-signature signs webhook-id.webhook-timestamp.body with a configured secret")
		return
	}
	switch age := s.cfg.Now().Sub(time.Unix(sec, 0)); {
	case age > GenericMaxAge:
		s.refuse(w, ch, "stale", http.StatusUnauthorized, fmt.Sprintf("webhook-timestamp is older than %s", GenericMaxAge))
		return
	case age < -GenericMaxAge:
		s.refuse(w, ch, "stale", http.StatusUnauthorized, fmt.Sprintf("webhook-timestamp is further ahead than %s: check this host's clock", GenericMaxAge))
		return
	}
	evs, err := parseGeneric(body, id, time.Unix(sec, 0).UTC())
	if err != nil {
		s.refuse(w, ch, "malformed", http.StatusBadRequest, err.Error())
		return
	}
	s.produce(w, r.Context(), ch, evs)
}

// genericSigned reports whether a signature of h's webhook-signature
// signs the request with one of Config.GenericSecrets.
func (s *Server) genericSigned(h http.Header, body []byte) bool {
	for _, key := range s.cfg.GenericSecrets {
		wh, err := standardwebhooks.NewWebhookRaw(key)
		if err == nil && wh.VerifyIgnoringTimestamp(body, h) == nil {
			return true
		}
	}
	return false
}

// checkWebhookID returns what is wrong with webhook-id id, "" if nothing:
// at most 256 printable ASCII characters without '.', which the
// specification forbids in a signed id (it delimits the signed content).
func checkWebhookID(id string) string {
	if len(id) > 256 {
		return "over 256 characters"
	}
	for _, c := range id {
		if c <= ' ' || c > '~' || c == '.' {
			return "printable ASCII without spaces or '.' only (the signed content is id.timestamp.body)"
		}
	}
	return ""
}

// genericOutcome is one element of a generic request's "outcomes".
type genericOutcome struct {
	Channel   string `json:"channel"`
	Key       string `json:"key"`
	Recipient string `json:"recipient"`
	Kind      string `json:"kind"`
	Reason    string `json:"reason"`
	Until     string `json:"until"`
}

// parseGeneric returns the events of a generic request's body
// ({"outcomes":[...]}) sent as webhook id at at, or an error naming the
// first field at fault. Event i's ID is "generic:<id>:<i>", so a request
// delivered again yields the same events. Recipients are hashed here:
// no address, number or token reaches Kafka.
func parseGeneric(body []byte, id string, at time.Time) ([]Event, error) {
	var b struct {
		Outcomes []genericOutcome `json:"outcomes"`
	}
	if err := json.Unmarshal(body, &b); err != nil {
		var te *json.UnmarshalTypeError
		if errors.As(err, &te) && te.Field != "" {
			want := map[reflect.Kind]string{reflect.String: "string", reflect.Slice: "array", reflect.Struct: "object"}[te.Type.Kind()]
			return nil, fmt.Errorf("%s: a JSON %s expected, not %s", te.Field, want, te.Value)
		}
		return nil, fmt.Errorf("body: not a JSON object {\"outcomes\":[...]}: %w", err)
	}
	switch {
	case len(b.Outcomes) == 0:
		return nil, errors.New("outcomes: missing or empty")
	case len(b.Outcomes) > MaxGenericOutcomes:
		return nil, fmt.Errorf("outcomes: %d, at most %d per request", len(b.Outcomes), MaxGenericOutcomes)
	}
	out := make([]Event, len(b.Outcomes))
	for i, o := range b.Outcomes {
		f := func(field, format string, a ...any) error {
			return fmt.Errorf("outcomes[%d].%s: %s", i, field, fmt.Sprintf(format, a...))
		}
		ev := Event{ID: "generic:" + id + ":" + strconv.Itoa(i), Channel: o.Channel, Key: o.Key, Kind: o.Kind, At: at}
		switch {
		case !genericChannel(o.Channel):
			return nil, f("channel", "%q, want one of %s", o.Channel, strings.Join(GenericChannels, ", "))
		case o.Key == "":
			return nil, f("key", "missing")
		case !validKey(o.Key):
			return nil, f("key", "the pacing key may hold letters, digits, '-', '_' and '.' and not start with '.' (at most 200)")
		case o.Recipient == "":
			return nil, f("recipient", "missing")
		}
		h, err := suppress.RecipientHash(o.Recipient)
		if err != nil {
			// The recipient is not echoed: it is an address or a number.
			return nil, f("recipient", "over %d bytes, or %s not followed by 24 lower-case hex digits", suppress.MaxRecipient, suppress.HashPrefix)
		}
		ev.Recipients = []string{h}
		switch o.Kind {
		case KindSuppress:
			r, err := suppress.ParseReason(o.Reason)
			if err != nil {
				return nil, f("reason", "%s", strings.TrimPrefix(err.Error(), "suppress: "))
			}
			ev.Reason = string(r)
			if o.Until != "" {
				if ev.Until, err = time.Parse(time.RFC3339, o.Until); err != nil {
					return nil, f("until", "%q is not an RFC 3339 time", o.Until)
				}
				ev.Until = ev.Until.UTC()
			}
		case KindUnsuppress:
			if o.Reason != "" || o.Until != "" {
				return nil, f(map[bool]string{true: "reason", false: "until"}[o.Reason != ""],
					"an unsuppress removes the entry whatever its reason, at once: leave it out")
			}
		default:
			return nil, f("kind", "%q, want suppress or unsuppress", o.Kind)
		}
		out[i] = ev
	}
	return out, nil
}

func genericChannel(ch string) bool {
	for _, c := range GenericChannels {
		if c == ch {
			return true
		}
	}
	return false
}

// applyPlatform applies the generic route's events of evs in their order
// (an unsuppress after a suppress of the same recipient wins, and the
// other way round): a suppress is suppress.Store.Add of an entry of its
// reason expiring at its until (none: until removed), as `pacer suppress
// add` writes it; an unsuppress is suppress.Store.Remove, as `pacer
// suppress remove`. Runs of one channel, key, kind and reason are written
// in one call. An entry is a function of its event alone (not of when it
// is applied or of the delivery's timestamp), so an event applied twice
// writes the same entry and counts once in
// pacer_webhook_suppressions_added_total; a second removal removes nothing
// and counts nothing in pacer_webhook_suppressions_removed_total.
func (o *Outcomes) applyPlatform(ctx context.Context, evs []Event) error {
	type run struct{ channel, key, kind, reason string }
	var cur run
	var hashes []string
	var entries []suppress.Entry
	flush := func() error {
		defer func() { hashes, entries = hashes[:0], entries[:0] }()
		if len(hashes) > 0 {
			n, err := o.store.Remove(ctx, cur.channel, cur.key, hashes...)
			if err != nil {
				return fmt.Errorf("webhook: apply %d unsuppressions of %s/%s: %w", len(hashes), cur.channel, cur.key, err)
			}
			o.m.removed.WithLabelValues(label(cur.channel, knownChannels)).Add(float64(n))
		}
		if len(entries) > 0 {
			n, err := o.store.Add(ctx, cur.channel, cur.key, entries...)
			if err != nil {
				return fmt.Errorf("webhook: apply %d suppressions of %s/%s: %w", len(entries), cur.channel, cur.key, err)
			}
			o.m.suppressed.WithLabelValues(label(cur.channel, knownChannels), cur.reason).Add(float64(n))
		}
		return nil
	}
	for _, ev := range evs {
		if ev.Kind != KindSuppress && ev.Kind != KindUnsuppress {
			continue
		}
		// A record someone else wrote to an events topic may say anything:
		// one Redis would refuse is skipped, not retried for ever.
		_, bad := suppress.ParseReason(ev.Reason)
		if ev.Kind == KindUnsuppress {
			bad = nil
		}
		for _, h := range ev.Recipients {
			if _, err := suppress.RecipientHash(suppress.HashPrefix + h); err != nil {
				bad = err
			}
		}
		if bad != nil || !genericChannel(ev.Channel) || !validKey(ev.Key) {
			o.log.Warn("platform outcome not applicable; skipped", "id", ev.ID, "channel", ev.Channel, "kind", ev.Kind)
			continue
		}
		if next := (run{ev.Channel, ev.Key, ev.Kind, ev.Reason}); next != cur {
			if err := flush(); err != nil {
				return err
			}
			cur = next
		}
		for _, h := range ev.Recipients {
			if ev.Kind == KindUnsuppress {
				hashes = append(hashes, h)
			} else {
				entries = append(entries, suppress.Entry{Hash: h, Reason: suppress.Reason(ev.Reason), Expires: ev.Until})
			}
		}
	}
	return flush()
}
