package envelope_test

import (
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/pacerhq/pacer/pacer/envelope"
)

func TestParseEnvelope(t *testing.T) {
	env, err := envelope.Parse([]byte(`  {"id":"c1-1","key":"106540352242922","to":"15551234567",
		"payload":{"type":"text","text":{"body":"hi"}},"campaign":"c1","tenant":"acme",
		"expires_at":"2030-01-02T03:04:05Z"}`))
	if err != nil {
		t.Fatal(err)
	}
	if env.ID != "c1-1" || env.Key != "106540352242922" || env.To != "15551234567" || env.Campaign != "c1" ||
		env.Tenant != "acme" || string(env.Payload) != `{"type":"text","text":{"body":"hi"}}` ||
		!env.ExpiresAt.Equal(time.Date(2030, 1, 2, 3, 4, 5, 0, time.UTC)) {
		t.Fatalf("got %+v", env)
	}
}

func TestParseEnvelopeErrorsNameTheField(t *testing.T) {
	for _, c := range []struct {
		name, in, field, problem string
	}{
		{"not an object", `[1,2]`, "", "not a JSON object: a JSON array"},
		{"empty", ``, "", "not a JSON object: empty"},
		{"string", `"hello"`, "", "not a JSON object: a JSON string"},
		{"plain text", `hello, world`, "", "not JSON: an envelope is one JSON object per line"},
		{"invalid UTF-8", "caf\xe9 au lait", "", "not JSON: invalid UTF-8 at byte 3"},
		{"UTF-16", "\xff\xfe{\x00\"\x00", "", "not JSON: invalid UTF-8 at byte 0 (UTF-16? save the file as UTF-8)"},
		{"byte order mark", "\xef\xbb\xbf" + `{"id":"a","key":"k","to":"t"}`, "", "byte order mark"},
		{"truncated", `{"id":"a",`, "", "invalid JSON"},
		{"id missing", `{"key":"k","to":"t"}`, "id", "required"},
		{"id empty", `{"id":"","key":"k","to":"t"}`, "id", "required"},
		{"id wrong type", `{"id":5,"key":"k","to":"t"}`, "id", "must be a string, got a number"},
		{"id invalid UTF-8", "{\"id\":\"zz-\xfe\",\"key\":\"k\",\"to\":\"t\"}", "id", "not valid UTF-8"},
		{"id other invalid UTF-8", "{\"id\":\"zz-\xff\",\"key\":\"k\",\"to\":\"t\"}", "id", "not valid UTF-8"},
		{"key lone surrogate", `{"id":"a","key":"k\ud800","to":"t"}`, "key", "not valid UTF-8"},
		{"payload invalid UTF-8", "{\"id\":\"a\",\"key\":\"k\",\"to\":\"t\",\"payload\":{\"text\":{\"body\":\"\xc3\"}}}", "payload/text/body", "not valid UTF-8"},
		{"campaign invalid UTF-8", "{\"id\":\"a\",\"key\":\"k\",\"to\":\"t\",\"campaign\":\"\xe2\x82\"}", "campaign", "not valid UTF-8"},
		{"id twice", `{"id":"a","key":"k","to":"t","id":"b"}`, "id", "given more than once"},
		{"payload member twice", `{"id":"a","key":"k","to":"t","payload":{"type":"text","type":"image"}}`, "payload/type", "given more than once"},
		{"misspelled expiry", `{"id":"a","key":"k","to":"t","expire_at":"2020-01-01T00:00:00Z"}`, "expire_at", "unknown field"},
		{"unknown field", `{"id":"a","key":"k","to":"t","priority_level":1}`, "priority_level", "unknown field"},
		{"campaign not a string", `{"id":"a","key":"k","to":"t","campaign":{}}`, "campaign", "must be a string, got an object"},
		{"id too long", `{"id":"` + strings.Repeat("x", 129) + `","key":"k","to":"t"}`, "id", "129 bytes, at most 128"},
		{"key missing", `{"id":"a","to":"t"}`, "key", "required"},
		{"key blank", `{"id":"a","key":"  ","to":"t"}`, "key", "required"},
		{"to padded", `{"id":"a","key":"k","to":" t"}`, "to", "leading or trailing spaces"},
		{"id with NUL", `{"id":"a\u0000b","key":"k","to":"t"}`, "id", "control character"},
		{"to missing", `{"id":"a","key":"k"}`, "to", "required"},
		{"payload array", `{"id":"a","key":"k","to":"t","payload":[1]}`, "payload", "must be a JSON object"},
		{"payload too big", `{"id":"a","key":"k","to":"t","payload":{"b":"` + strings.Repeat("x", envelope.MaxPayloadBytes) + `"}}`, "payload", "at most 1048576"},
		{"bad expiry", `{"id":"a","key":"k","to":"t","expires_at":"tomorrow"}`, "expires_at", "not an RFC 3339 time"},
	} {
		t.Run(c.name, func(t *testing.T) {
			_, err := envelope.Parse([]byte(c.in))
			var ee *envelope.Error
			if !errors.As(err, &ee) || ee.Field != c.field || !strings.Contains(ee.Problem, c.problem) {
				t.Fatalf("err = %v, want field %q problem containing %q", err, c.field, c.problem)
			}
		})
	}
}

// A payload is free-form below its top level: any members, any nesting.
func TestParseEnvelopePayloadIsFreeForm(t *testing.T) {
	env, err := envelope.Parse([]byte(`{"id":"a","key":"k","to":"t","payload":{"anything":{"nested":[1,{"x":"\u00e9\ud83d\ude00"}]},"id":"not the envelope's"}}`))
	if err != nil {
		t.Fatal(err)
	}
	if env.ID != "a" || !strings.Contains(string(env.Payload), `"anything"`) {
		t.Fatalf("got %+v", env)
	}
}

func TestParseEnvelopeLimitsAreInclusive(t *testing.T) {
	id := strings.Repeat("x", envelope.MaxIDBytes)
	if _, err := envelope.Parse([]byte(`{"id":"` + id + `","key":"k","to":"t","payload":null}`)); err != nil {
		t.Fatalf("128-byte id: %v", err)
	}
}

func TestExpired(t *testing.T) {
	now := time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)
	for _, c := range []struct {
		exp  time.Time
		want bool
	}{
		{time.Time{}, false},
		{now.Add(time.Second), false},
		{now, true},
		{now.Add(-time.Second), true},
	} {
		if got := (envelope.Envelope{ExpiresAt: c.exp}).Expired(now); got != c.want {
			t.Errorf("Expired with expires_at %v = %v, want %v", c.exp, got, c.want)
		}
	}
}

// TestEnvelopeID: the id of a line that is not published, named in its
// report, even where the envelope's strict checks refuse the line.
func TestEnvelopeID(t *testing.T) {
	for _, c := range []struct{ name, in, want string }{
		{"valid", `{"id":"a-1","key":"k","to":"t"}`, "a-1"},
		{"field missing", ` {"id":"a-2","key":"k"} `, "a-2"},
		{"invalid UTF-8 elsewhere", "{\"id\":\"a-3\",\"key\":\"k\",\"to\":\"\xfe\"}", "a-3"},
		{"id twice", `{"id":"a-4","key":"k","to":"t","id":"a-5"}`, "a-5"},
		{"byte order mark", "\xef\xbb\xbf" + `{"id":"a-6","key":"k","to":"t"}`, "a-6"},
		{"no id", `{"key":"k","to":"t"}`, ""},
		{"id a number", `{"id":5,"key":"k","to":"t"}`, ""},
		{"invalid JSON", `{"id":"a-7",`, ""},
		{"not an object", `["a-8"]`, ""},
	} {
		if got := envelope.PeekID([]byte(c.in)); got != c.want {
			t.Errorf("%s: PeekID = %q, want %q", c.name, got, c.want)
		}
	}
}

// TestEnvelopePriorityNotBefore: priority defaults to normal, accepts high
// and normal only; not_before must be RFC 3339; both are named when wrong.
func TestEnvelopePriorityNotBefore(t *testing.T) {
	const head = `{"id":"a","key":"k","to":"t"`
	for in, want := range map[string]string{
		head + `}`:                                     "normal",
		head + `,"priority":"high"}`:                   "high",
		head + `,"priority":"normal"}`:                 "normal",
		head + `,"priority":"urgent"}`:                 "envelope: priority: \"urgent\" is neither high nor normal",
		head + `,"priority":1}`:                        "envelope: priority: must be a string, got a number",
		head + `,"not_before":"tomorrow"}`:             "envelope: not_before: \"tomorrow\" is not an RFC 3339 time",
		head + `,"not_before":"2030-01-02T03:04:05Z"}`: "normal 2030-01-02T03:04:05Z",
		head + `,"priorty":"high"}`:                    "envelope: priorty: unknown field (an envelope has id, key, to, payload, campaign, tenant, expires_at, priority, not_before, category)",
	} {
		env, err := envelope.Parse([]byte(in))
		got := ""
		if err != nil {
			got = err.Error()
		} else {
			got = string(env.Priority)
			if !env.NotBefore.IsZero() {
				got += " " + env.NotBefore.Format(time.RFC3339)
			}
		}
		if got != want {
			t.Errorf("%s: %q, want %q", in, got, want)
		}
	}
}

// TestEnvelopeCategory: category takes the four WhatsApp categories (or
// none) and names itself when wrong; BusinessInitiated counts marketing,
// utility and authentication, not service, and without a category a
// template payload only; Marketing needs the category.
func TestEnvelopeCategory(t *testing.T) {
	const head = `{"id":"a","key":"k","to":"t"`
	const tmpl = `,"payload":{"type":"template","template":{"name":"x"}}`
	const text = `,"payload":{"type":"text","text":{"body":"hi"}}`
	for in, want := range map[string]string{
		head + `}`:                                    " business=false marketing=false",
		head + text + `}`:                             " business=false marketing=false",
		head + tmpl + `}`:                             " business=true marketing=false",
		head + `,"category":"marketing"}`:             "marketing business=true marketing=true",
		head + `,"category":"utility"}`:               "utility business=true marketing=false",
		head + `,"category":"authentication"}`:        "authentication business=true marketing=false",
		head + `,"category":"service"` + tmpl + `}`:   "service business=false marketing=false",
		head + `,"category":"marketing"` + text + `}`: "marketing business=true marketing=true",
		head + `,"category":"promo"}`:                 `envelope: category: "promo" is not one of marketing, utility, authentication, service`,
		head + `,"category":"Marketing"}`:             `envelope: category: "Marketing" is not one of marketing, utility, authentication, service`,
		head + `,"category":2}`:                       "envelope: category: must be a string, got a number",
	} {
		env, err := envelope.Parse([]byte(in))
		got := ""
		if err != nil {
			got = err.Error()
		} else {
			got = fmt.Sprintf("%s business=%v marketing=%v", env.Category, env.BusinessInitiated(), env.Marketing())
		}
		if got != want {
			t.Errorf("%s: %q, want %q", in, got, want)
		}
	}
}

// TestCheckCampaign: a publisher refuses a campaign name it could never
// name again: longer than MaxCampaignBytes, invalid UTF-8, or with a
// control character; the error names the field campaign.
func TestCheckCampaign(t *testing.T) {
	for _, c := range []string{"", "spring", "printemps-été", strings.Repeat("x", envelope.MaxCampaignBytes)} {
		if err := envelope.CheckCampaign(c); err != nil {
			t.Errorf("CheckCampaign(%.20q): %v; want nil", c, err)
		}
	}
	for _, c := range []struct{ name, want string }{
		{strings.Repeat("x", envelope.MaxCampaignBytes+1), "envelope: campaign: 129 bytes, at most 128 allowed"},
		{strings.Repeat("x", 200_000), "envelope: campaign: 200000 bytes, at most 128 allowed"},
		{"spr\ning", "envelope: campaign: contains a control character"},
		{"spr\x7fing", "envelope: campaign: contains a control character"},
		{"caf\xe9", "envelope: campaign: not valid UTF-8"},
	} {
		err := envelope.CheckCampaign(c.name)
		var ee *envelope.Error
		if err == nil || err.Error() != c.want || !errors.As(err, &ee) || ee.Field != "campaign" {
			t.Errorf("CheckCampaign(%.20q): %v; want %q naming campaign", c.name, err, c.want)
		}
	}
}
