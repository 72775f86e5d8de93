// Package envelope defines the message Pacer carries: the [Envelope], one
// JSON object per Kafka record value (and per line of a campaign file), its
// strict parsing ([Parse], errors as *[Error] naming the field), and the
// Kafka record headers Pacer and its publishers write beside it
// ([HeaderCampaign], the pacer-* bookkeeping headers). The consumer, the
// producer-side tools (publish, DLQ replay) and the ingest gateway all read
// and write envelopes through it.
package envelope

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"

	jsonv2 "github.com/go-json-experiment/json"
	"github.com/go-json-experiment/json/jsontext"
)

// Envelope limits.
const (
	// MaxIDBytes is the longest envelope id accepted, in bytes.
	MaxIDBytes = 128
	// MaxPayloadBytes is the largest payload accepted, in bytes of JSON (1 MiB).
	MaxPayloadBytes = 1 << 20
	// MaxCampaignBytes is the longest campaign name a publisher (pacer
	// publish, the ingest API) accepts, in bytes.
	MaxCampaignBytes = 128
)

// CheckCampaign returns what is wrong with an envelope's campaign name
// for a publisher, as an *[Error] naming the field campaign, or nil: at
// most [MaxCampaignBytes] bytes of valid UTF-8 without control characters,
// so that every name published can be named again by `pacer campaign` and
// the ingest API's campaign paths (an empty name is none). Publishers
// (pacer publish, the ingest API) call it after [Parse]; Parse itself
// does not, so records already in Kafka with other names are still
// delivered.
func CheckCampaign(c string) error {
	switch {
	case c == "":
		return nil
	case len(c) > MaxCampaignBytes:
		return &Error{Field: "campaign", Problem: fmt.Sprintf("%d bytes, at most %d allowed", len(c), MaxCampaignBytes)}
	case !utf8.ValidString(c):
		return &Error{Field: "campaign", Problem: "not valid UTF-8"}
	case strings.IndexFunc(c, unicode.IsControl) >= 0:
		return &Error{Field: "campaign", Problem: "contains a control character"}
	}
	return nil
}

// Envelope is one message as published to a channel topic, one JSON object
// per Kafka record value (and per line of a campaign file):
//
//	{"id":"c1-000001","key":"106540352242922","to":"15551234567",
//	 "payload":{"type":"text","text":{"body":"hello"}},
//	 "campaign":"c1","tenant":"acme","expires_at":"2026-12-01T00:00:00Z"}
//
// ID is the idempotency key; Key is the pacing key (for WhatsApp the business
// phone-number ID) and also the Kafka record key.
type Envelope struct {
	ID        string          `json:"id"`
	Key       string          `json:"key"`
	To        string          `json:"to"`
	Payload   json.RawMessage `json:"payload,omitempty"`
	Campaign  string          `json:"campaign,omitempty"`
	Tenant    string          `json:"tenant,omitempty"`
	ExpiresAt time.Time       `json:"expires_at,omitzero"`
	// Priority is "high" or "normal" ("" on the wire means normal): a
	// high record goes ahead of its pacing key's queued normal ones, at the
	// key's rate.
	Priority Priority `json:"priority,omitempty"`
	// NotBefore is the earliest time the message may be sent (zero: at once).
	NotBefore time.Time `json:"not_before,omitzero"`
	// Category is the message's WhatsApp pricing category ("" when not
	// given): which messages count against a business portfolio's
	// messaging limit ([Envelope.BusinessInitiated]) and which a
	// marketing-only suppression (WhatsApp 131049) refuses.
	Category Category `json:"category,omitempty"`
}

// Category is a message's pricing category, as WhatsApp names them
// (developers.facebook.com/documentation/business-messaging/whatsapp/pricing):
// marketing, utility and authentication templates open business-initiated
// conversations; service messages answer a user within the 24 h customer
// service window.
type Category string

const (
	CategoryMarketing      Category = "marketing"
	CategoryUtility        Category = "utility"
	CategoryAuthentication Category = "authentication"
	CategoryService        Category = "service"
)

// BusinessInitiated reports whether e counts against a WhatsApp business
// portfolio's messaging limit (unique users per moving 24 h). With a
// category: marketing, utility and authentication count, service does
// not. Without one, the payload decides: a template message counts (only
// a template may open a conversation outside the customer service
// window, so a template of unknown category is counted, never
// under-counted); anything else (free-form text, media, reactions) can
// only be sent inside the window and does not count.
func (e *Envelope) BusinessInitiated() bool {
	switch e.Category {
	case CategoryMarketing, CategoryUtility, CategoryAuthentication:
		return true
	case CategoryService:
		return false
	}
	var p struct {
		Type string `json:"type"`
	}
	if len(e.Payload) == 0 || json.Unmarshal(e.Payload, &p) != nil {
		return false
	}
	return p.Type == "template"
}

// Marketing reports whether e is a marketing message: only its category
// says so (a template without a category may be a one-time password, and
// a marketing-only suppression must not refuse it).
func (e *Envelope) Marketing() bool { return e.Category == CategoryMarketing }

// Priority orders the records of one pacing key: high ones go first.
type Priority string

const (
	PriorityNormal Priority = "normal"
	PriorityHigh   Priority = "high"
)

// Error says which field of an envelope is wrong and why.
type Error struct {
	Field   string // JSON field name; "" when the whole value is not a JSON object
	Problem string
}

func (e *Error) Error() string {
	if e.Field == "" {
		return "envelope: " + e.Problem
	}
	return fmt.Sprintf("envelope: %s: %s", e.Field, e.Problem)
}

// wireEnvelope keeps expires_at as text so a bad timestamp is reported by
// field name rather than as a generic decode error.
type wireEnvelope struct {
	ID        string         `json:"id"` // absent, null and "" alike: required
	Key       string         `json:"key"`
	To        string         `json:"to"`
	Payload   jsontext.Value `json:"payload"`
	Campaign  string         `json:"campaign"`
	Tenant    string         `json:"tenant"`
	ExpiresAt string         `json:"expires_at"`
	Priority  string         `json:"priority"`
	NotBefore string         `json:"not_before"`
	Category  string         `json:"category"`
}

// fields lists the top-level fields an envelope may have, for the
// error about an unknown one.
const fields = "id, key, to, payload, campaign, tenant, expires_at, priority, not_before, category"

// PeekID returns the "id" member of line b when b is a JSON object
// whose id is a string, else "": what the report of a line that is not
// published names besides its number, so its sender can find it.
func PeekID(b []byte) string {
	var w struct {
		ID string `json:"id"`
	}
	// Lenient where the envelope's checks are strict: a line refused for
	// invalid UTF-8 or a member given twice still has an id to name (the
	// last one given; invalid bytes read as U+FFFD).
	b = bytes.TrimPrefix(bytes.TrimSpace(b), utf8BOM)
	if jsonv2.Unmarshal(b, &w, jsontext.AllowInvalidUTF8(true), jsontext.AllowDuplicateNames(true)) != nil {
		return ""
	}
	return w.ID
}

// utf8BOM is the UTF-8 byte order mark some editors put at a file's start.
var utf8BOM = []byte("\xef\xbb\xbf")

// Parse decodes and validates one envelope. It is strict, so that
// nothing is silently changed or dropped: invalid UTF-8 anywhere (raw bytes
// or an unpaired \u surrogate escape), a field given twice (at any depth)
// and an unknown top-level field (a misspelled expires_at would otherwise
// send after the deadline) are refused; payload stays free-form otherwise.
// The error, when not nil, is an *[Error] naming the field: id
// (required, at most [MaxIDBytes] bytes), key and to (required), payload (a
// JSON object of at most [MaxPayloadBytes] bytes), expires_at and
// not_before (RFC 3339), priority ("high" or "normal"; absent means normal),
// category (marketing, utility, authentication or service; may be absent),
// or the unknown, duplicated or badly encoded field (a path such as
// payload/text/body below the top level).
func Parse(b []byte) (Envelope, error) {
	var w wireEnvelope
	b = bytes.TrimSpace(b)
	if bytes.HasPrefix(b, utf8BOM) {
		return Envelope{}, &Error{Problem: "starts with a UTF-8 byte order mark (BOM); save the file as UTF-8 without BOM"}
	}
	if len(b) == 0 || b[0] != '{' {
		return Envelope{}, notObject(b)
	}
	if err := jsonv2.Unmarshal(b, &w, jsonv2.RejectUnknownMembers(true)); err != nil {
		return Envelope{}, decodeError(err)
	}
	env := Envelope{Campaign: w.Campaign, Tenant: w.Tenant, Payload: json.RawMessage(w.Payload)}
	for _, f := range [...]struct {
		name string
		v    string
	}{{"id", w.ID}, {"key", w.Key}, {"to", w.To}} {
		if strings.TrimSpace(f.v) == "" {
			return Envelope{}, &Error{Field: f.name, Problem: "required"}
		}
		if !utf8.ValidString(f.v) {
			return Envelope{}, &Error{Field: f.name, Problem: "not valid UTF-8"}
		}
		if strings.IndexFunc(f.v, unicode.IsControl) >= 0 {
			return Envelope{}, &Error{Field: f.name, Problem: "contains a control character"}
		}
		if f.v != strings.TrimSpace(f.v) {
			return Envelope{}, &Error{Field: f.name, Problem: "has leading or trailing spaces"}
		}
	}
	env.ID, env.Key, env.To = w.ID, w.Key, w.To
	if len(env.ID) > MaxIDBytes {
		return Envelope{}, &Error{Field: "id", Problem: fmt.Sprintf("%d bytes, at most %d allowed", len(env.ID), MaxIDBytes)}
	}
	if p := bytes.TrimSpace(env.Payload); len(p) > 0 && !bytes.Equal(p, []byte("null")) {
		if len(p) > MaxPayloadBytes {
			return Envelope{}, &Error{Field: "payload", Problem: fmt.Sprintf("%d bytes, at most %d allowed", len(p), MaxPayloadBytes)}
		}
		if p[0] != '{' {
			return Envelope{}, &Error{Field: "payload", Problem: "must be a JSON object"}
		}
		env.Payload = p
	} else {
		env.Payload = nil
	}
	if w.ExpiresAt != "" {
		t, err := time.Parse(time.RFC3339Nano, w.ExpiresAt)
		if err != nil {
			return Envelope{}, &Error{Field: "expires_at", Problem: fmt.Sprintf("%q is not an RFC 3339 time", w.ExpiresAt)}
		}
		env.ExpiresAt = t
	}
	if w.NotBefore != "" {
		t, err := time.Parse(time.RFC3339Nano, w.NotBefore)
		if err != nil {
			return Envelope{}, &Error{Field: "not_before", Problem: fmt.Sprintf("%q is not an RFC 3339 time", w.NotBefore)}
		}
		env.NotBefore = t
	}
	switch Priority(w.Priority) {
	case "", PriorityNormal:
		env.Priority = PriorityNormal
	case PriorityHigh:
		env.Priority = PriorityHigh
	default:
		return Envelope{}, &Error{Field: "priority", Problem: fmt.Sprintf("%q is neither high nor normal", w.Priority)}
	}
	switch c := Category(w.Category); c {
	case "", CategoryMarketing, CategoryUtility, CategoryAuthentication, CategoryService:
		env.Category = c
	default:
		return Envelope{}, &Error{Field: "category", Problem: fmt.Sprintf("%q is not one of marketing, utility, authentication, service", w.Category)}
	}
	return env, nil
}

// notObject says what b, which does not start with "{", is instead: empty,
// not UTF-8 (a UTF-16 file's byte order mark named), JSON of another
// kind, or not JSON at all. It never quotes b, which may be a message.
func notObject(b []byte) *Error {
	switch {
	case len(b) == 0:
		return &Error{Problem: "not a JSON object: empty"}
	case !utf8.Valid(b):
		at := 0
		for at < len(b) {
			r, n := utf8.DecodeRune(b[at:])
			if r == utf8.RuneError && n <= 1 {
				break
			}
			at += n
		}
		hint := "; the file must be UTF-8 text"
		if bytes.HasPrefix(b, []byte{0xff, 0xfe}) || bytes.HasPrefix(b, []byte{0xfe, 0xff}) {
			hint = " (UTF-16? save the file as UTF-8)"
		}
		return &Error{Problem: fmt.Sprintf("not JSON: invalid UTF-8 at byte %d%s", at, hint)}
	case jsontext.Value(b).IsValid():
		kind := map[jsontext.Kind]string{'n': "null", 'f': "boolean", 't': "boolean", '"': "string",
			'0': "number", '[': "array"}[jsontext.Value(b).Kind()]
		return &Error{Problem: "not a JSON object: a JSON " + kind}
	}
	return &Error{Problem: `not JSON: an envelope is one JSON object per line, {"id":…,"key":…,"to":…}`}
}

// decodeError turns a JSON decoding error into an *Error naming the
// field (as a path below the envelope, e.g. "payload/text/body") in words
// a producer can act on, without Go type names.
func decodeError(err error) *Error {
	var se *jsonv2.SemanticError
	var xe *jsontext.SyntacticError
	switch {
	case errors.As(err, &se) && errors.Is(se.Err, jsonv2.ErrUnknownName):
		return &Error{Field: field(se.JSONPointer), Problem: "unknown field (an envelope has " + fields + ")"}
	case errors.As(err, &se):
		what := "a string"
		if se.JSONPointer == "/payload" {
			what = "a JSON object"
		}
		got := map[jsontext.Kind]string{'n': "null", 'f': "a boolean", 't': "a boolean", '"': "a string",
			'0': "a number", '{': "an object", '[': "an array"}[se.JSONKind]
		if got == "" {
			got = "something else"
		}
		return &Error{Field: field(se.JSONPointer), Problem: "must be " + what + ", got " + got}
	case errors.As(err, &xe) && errors.Is(xe.Err, jsontext.ErrDuplicateName):
		return &Error{Field: field(xe.JSONPointer), Problem: "given more than once"}
	case errors.As(err, &xe) && (strings.Contains(xe.Err.Error(), "UTF-8") || strings.Contains(xe.Err.Error(), "surrogate")):
		return &Error{Field: field(xe.JSONPointer), Problem: "not valid UTF-8"}
	case errors.As(err, &xe):
		return &Error{Field: field(xe.JSONPointer), Problem: fmt.Sprintf("invalid JSON at byte %d: %v", xe.ByteOffset, xe.Err)}
	}
	return &Error{Problem: "invalid JSON: " + err.Error()}
}

// field renders a JSON pointer as a field path without the leading slash.
func field(p jsontext.Pointer) string { return strings.TrimPrefix(string(p), "/") }

// High reports whether the envelope has priority high.
func (e Envelope) High() bool { return e.Priority == PriorityHigh }

// Expired reports whether the envelope has an expiry at or before now.
func (e Envelope) Expired(now time.Time) bool {
	return !e.ExpiresAt.IsZero() && !now.Before(e.ExpiresAt)
}
