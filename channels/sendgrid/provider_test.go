package sendgrid_test

// Tests built from SendGrid's documented statuses and bodies for the
// defects a review of the adapter against the SendGrid documentation found.

import (
	"encoding/json"
	"net/http"
	"testing"

	"github.com/pacerhq/pacer/bucket/adapt"
	"github.com/pacerhq/pacer/channels"
	"github.com/pacerhq/pacer/channels/internal/channeltest"
	"github.com/pacerhq/pacer/channels/sendgrid"
	"github.com/pacerhq/pacer/channels/sendgrid/sendgridtest"
)

// TestDataResidencyHaltsKey: 451 "Unavailable due to data residency
// restrictions" says the key's account keeps its data in a region this
// host does not serve (an EU regional subuser must use
// https://api.eu.sendgrid.com): every mail of the key fails alike, so the
// key halts instead of each message being dead-lettered.
// Source: https://www.twilio.com/docs/sendgrid/api-reference/how-to-use-the-sendgrid-v3-api/errors
// (451) and https://www.twilio.com/docs/sendgrid/api-reference/mail-send (regional host).
func TestDataResidencyHaltsKey(t *testing.T) {
	e := sendErr(t, channeltest.Respond(t, http.StatusUnavailableForLegalReasons, channeltest.ReadTestdata(t, "451.json")))
	if e.Class != channels.Halt || e.Scope != channels.ScopeKey || e.Status != 451 ||
		e.Detail != "Unavailable due to data residency restrictions" {
		t.Errorf("got %+v; want halt of the key with SendGrid's message", e)
	}
	t.Run("against the fake", func(t *testing.T) {
		fake := sendgridtest.NewServer(sendgridtest.Config{APIKeys: keys(), RegionalKeys: []string{keyName}})
		defer fake.Close()
		e := sendErrWith(t, newClient(t, fake.URL()), message())
		if e.Class != channels.Halt || e.Status != 451 {
			t.Errorf("got %+v; want halt 451", e)
		}
		m := message()
		m.Key = "transactional"
		if _, err := newClient(t, fake.URL()).Send(t.Context(), m); err != nil {
			t.Errorf("another key of the same host: %v", err)
		}
	})
}

// TestTemporaryBlockAgainstFake: after repeated bad requests SendGrid
// answers 403 "You are temporarily blocked from sending emails due to
// repeated bad requests."; the adapter makes it a long throttle of the key
// (BlockCooldown), not a halt, and the fake blocks the key like SendGrid.
// Source: https://www.twilio.com/docs/sendgrid/api-reference/how-to-use-the-sendgrid-v3-api/responses
// (403, "You are temporarily blocked ...").
func TestTemporaryBlockAgainstFake(t *testing.T) {
	fake := sendgridtest.NewServer(sendgridtest.Config{APIKeys: keys(), BlockAfter: 2})
	defer fake.Close()
	c := newClient(t, fake.URL())
	bad := message()
	bad.Payload = json.RawMessage(`{"subject":"no from, no content"}`)
	for i := range 2 {
		if e := sendErrWith(t, c, bad); e.Class != channels.Permanent || e.Status != 400 {
			t.Fatalf("bad request %d: %+v; want permanent 400", i, e)
		}
	}
	e := sendErrWith(t, c, message())
	if e.Class != channels.Throttle || e.Status != 403 || e.RetryAfter < sendgrid.BlockCooldown {
		t.Errorf("after 2 bad requests: %+v; want a throttle of at least %v", e, sendgrid.BlockCooldown)
	}
}

// TestAcceptHeaderAgainstFake: SendGrid answers 406 to a request without
// an Accept header; the fake does too, and the adapter's requests pass.
// Source: https://www.twilio.com/docs/sendgrid/api-reference/how-to-use-the-sendgrid-v3-api/responses
// (406 "Missing the Accept header. For example: Accept: application/json").
func TestAcceptHeaderAgainstFake(t *testing.T) {
	fake := sendgridtest.NewServer(sendgridtest.Config{APIKeys: keys()})
	defer fake.Close()
	if _, err := newClient(t, fake.URL()).Send(t.Context(), message()); err != nil {
		t.Fatalf("Send: %v", err)
	}
	if st := fake.Stats()[keyName]; st.Delivered != 1 {
		t.Errorf("fake stats %+v; want 1 delivered", st)
	}
}

// TestThrottleWithoutRateLimitHeaders: Mail Send may answer 429 without
// X-RateLimit-* headers (a SendGrid maintainer: "the Rate Limit
// information is not returned on the mail/send endpoint",
// https://github.com/sendgrid/sendgrid-go/issues/105). The adapter still
// throttles the key, with no hint (RetryAfter 0), so the pacer falls back
// to its documented cooldown (PACER_THROTTLE_COOLDOWN, the AIMD's
// MinCooldown: by default one token interval of the key's rate within
// 10 ms .. 1 s) and its rate cut, rather than a wait read from a header
// that is not there; the accepted sends go on.
func TestThrottleWithoutRateLimitHeaders(t *testing.T) {
	fake := sendgridtest.NewServer(sendgridtest.Config{Rate: 0.001, Burst: 2, APIKeys: keys(), NoRateLimitHeaders: true})
	defer fake.Close()
	c, err := sendgrid.New(sendgrid.Config{BaseURL: fake.URL(), APIKeys: keys()})
	if err != nil {
		t.Fatal(err)
	}
	ok, throttled := channeltest.CountAnswers(t, 4, channeltest.Numbered(message()), channeltest.Bound(t.Context(), c.Send),
		func(res channels.Result) bool { return res.ProviderID != "" },
		func(e *channels.Error) bool {
			return e.Class == channels.Throttle && e.Status == 429 && e.Scope == channels.ScopeKey &&
				e.RetryAfter == 0 && e.Detail == "too many requests"
		})
	if ok != 2 || throttled != 2 {
		t.Errorf("accepted %d, throttled %d; want 2, 2", ok, throttled)
	}
	if lo, _ := (adapt.AIMD{}).CooldownBounds(); (adapt.AIMD{}).CooldownFor(0) != lo {
		t.Errorf("cooldown of a throttle without a hint = %v, want MinCooldown %v", (adapt.AIMD{}).CooldownFor(0), lo)
	}
	if st := fake.Stats()[keyName]; st.Delivered != 2 || st.Throttled != 2 {
		t.Errorf("fake stats = %+v", st)
	}
}
