package whatsapp_test

// Tests built from Meta's documented bodies for the defects a review of
// the adapter against the Cloud API documentation found.

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/pacerhq/pacer/channels"
	"github.com/pacerhq/pacer/channels/internal/channeltest"
	"github.com/pacerhq/pacer/channels/whatsapp"
)

// TestNotRegisteredHaltsKey: error 133010 "Account not registered" means
// the business phone number (the pacing key) is not registered on the
// platform, so every message from it fails until it is registered: the key
// halts (nothing dropped) instead of each message being dead-lettered.
// Body: testdata/133010.json, title and details from
// https://developers.facebook.com/documentation/business-messaging/whatsapp/support/error-codes
// (133010, HTTP 400); registration:
// https://developers.facebook.com/documentation/business-messaging/whatsapp/business-phone-numbers/registration/
func TestNotRegisteredHaltsKey(t *testing.T) {
	body := channeltest.ReadTestdata(t, "133010.json")
	e := sendErr(t, channeltest.Respond(t, http.StatusBadRequest, body, "Content-Type", "application/json"))
	if e.Code != "133010" || e.Class != channels.Halt || e.Scope != channels.ScopeKey {
		t.Errorf("got code=%q class=%v scope=%v; want 133010 halt key", e.Code, e.Class, e.Scope)
	}
}

// TestSpamRateLimitLongCooldown: error 131048 "Spam rate limit hit" is a
// restriction on the number because of its quality, which lasts far longer
// than a throughput throttle: the key cools down SpamCooldown (an hour), not
// the pacer's default second; a longer Retry-After still wins. Body:
// testdata/131048.json from
// https://developers.facebook.com/documentation/business-messaging/whatsapp/support/error-codes
// (131048: "Message failed to send because there are restrictions on how
// many messages can be sent from this phone number").
func TestSpamRateLimitLongCooldown(t *testing.T) {
	body := channeltest.ReadTestdata(t, "131048.json")
	for _, c := range []struct {
		name   string
		header []string
		want   time.Duration
	}{
		{"no Retry-After", nil, whatsapp.SpamCooldown},
		{"shorter Retry-After", []string{"Retry-After", "30"}, whatsapp.SpamCooldown},
		{"longer Retry-After", []string{"Retry-After", "7200"}, 2 * time.Hour},
	} {
		t.Run(c.name, func(t *testing.T) {
			e := sendErr(t, channeltest.Respond(t, http.StatusBadRequest, body, c.header...))
			if e.Class != channels.Throttle || e.Scope != channels.ScopeKey || e.RetryAfter != c.want {
				t.Errorf("got class=%v scope=%v RetryAfter=%v; want throttle key %v", e.Class, e.Scope, e.RetryAfter, c.want)
			}
		})
	}
	if whatsapp.SpamCooldown < time.Hour {
		t.Errorf("SpamCooldown = %v; a quality restriction needs at least an hour", whatsapp.SpamCooldown)
	}
}

// TestCallbackDataLimit: the Cloud API takes a biz_opaque_callback_data of
// at most 512 characters (raised from 256 in 2024). The adapter refuses a
// longer one, or one that is not a string, as Permanent with a Code naming
// the field, without a request; 512 characters (not bytes) still go out.
// Sources: https://developers.facebook.com/docs/whatsapp/cloud-api/reference/messages
// ("Maximum 512 characters") and
// https://developers.facebook.com/docs/whatsapp/business-platform/changelog.
func TestCallbackDataLimit(t *testing.T) {
	var requests atomic.Int32
	ts := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		requests.Add(1)
		w.Write([]byte(channeltest.ReadTestdata(t, "success.json")))
	}))
	t.Cleanup(ts.Close)
	c := newClient(t, ts.URL)
	for _, tc := range []struct {
		name  string
		value any
		ok    bool
	}{
		{"512 characters", strings.Repeat("é", 512), true},
		{"513 characters", strings.Repeat("a", 513), false},
		{"not a string", 42, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			v, _ := json.Marshal(tc.value)
			m := message()
			m.Payload = json.RawMessage(`{"type":"text","text":{"body":"hi"},"biz_opaque_callback_data":` + string(v) + `}`)
			err := channeltest.CheckLocalLimit(t, requests.Load, channeltest.Bound(t.Context(), c.Send), m, tc.ok, whatsapp.CodeCallbackDataTooLong)
			if !tc.ok && channels.MaybeAccepted(err) {
				t.Error("MaybeAccepted = true for a message never sent")
			}
		})
	}
}

// TestRetiredVersion: Meta retires a Graph API version on a published
// date, after which every request to it fails; New refuses such a version
// at start-up, naming the field, and the default is one Meta still serves.
// Dates: https://developers.facebook.com/docs/graph-api/changelog/versions/
func TestRetiredVersion(t *testing.T) {
	day := func(s string) time.Time {
		d, err := time.Parse(time.DateOnly, s)
		if err != nil {
			t.Fatal(err)
		}
		return d
	}
	for _, c := range []struct {
		version string
		at      string
		retired bool
	}{
		{"v21.0", "2027-01-20", false},
		{"v21.0", "2027-01-21", true},
		{"v20.0", "2026-09-24", true},
		{"v12.0", "2024-01-01", true},
		{"v25.0", "2028-07-28", false},
		{"v25.0", "2028-07-29", true},
		{whatsapp.DefaultAPIVersion, "2028-07-29", false},
		{"v99.0", "2030-01-01", false},
	} {
		_, retired, err := whatsapp.Retired(c.version, day(c.at))
		if err != nil || retired != c.retired {
			t.Errorf("Retired(%s, %s) = %v, %v; want %v", c.version, c.at, retired, err, c.retired)
		}
	}
	for _, bad := range []string{"21.0", "v21", "v1/x", "latest"} {
		if _, _, err := whatsapp.Retired(bad, time.Now()); err == nil {
			t.Errorf("Retired(%q) accepted a malformed version", bad)
		}
	}
	if _, err := whatsapp.New(whatsapp.Config{Token: token, APIVersion: "v20.0"}); err == nil ||
		!strings.Contains(err.Error(), "Config.APIVersion") || !strings.Contains(err.Error(), "2026-09-24") {
		t.Errorf("New(v20.0) = %v; want an error naming Config.APIVersion and the retirement date", err)
	}
	if _, retired, _ := whatsapp.Retired(whatsapp.DefaultAPIVersion, time.Now()); retired {
		t.Errorf("DefaultAPIVersion %s is retired", whatsapp.DefaultAPIVersion)
	}
	if _, err := whatsapp.New(whatsapp.Config{Token: token}); err != nil {
		t.Errorf("New with the default version: %v", err)
	}
}
