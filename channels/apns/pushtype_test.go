package apns_test

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/pacerhq/pacer/channels"
	"github.com/pacerhq/pacer/channels/internal/channeltest"
)

// TestThrottleWithoutReason: a 429 is a throttle of this device token
// whether or not its body names the reason. Apple lists a single 429
// reason for sends ("TooManyRequests: too many requests were made
// consecutively to the same device token") besides the provider-token one
// (https://developer.apple.com/documentation/usernotifications/handling-notification-responses-from-apns,
// providers.md §2.1 and §2.3); a bare 429, or one with a reason we do not
// know, means the same and must slow down the token, not be retried at once.
func TestThrottleWithoutReason(t *testing.T) {
	for _, body := range []string{"", "{}", `{"reason":"SomethingNew"}`, "<html>429</html>"} {
		e := sendErr(t, newClient(t, config(t, respond(t, 429, body))), message())
		if e.Class != channels.Throttle || e.Scope != channels.ScopePair || e.Status != 429 {
			t.Errorf("429 %q: class %v scope %v status %d; want throttle, pair, 429", body, e.Class, e.Scope, e.Status)
		}
	}
}

// TestPushTypeDefault: without an apns-push-type header, Send sends one:
// "background" for a payload whose aps holds only content-available 1, with
// apns-priority 5 unless given, and "alert" otherwise. Apple: the header is
// required on watchOS and recommended elsewhere; a background push must be
// "background" with priority 5, its aps "only the content-available key"
// (https://developer.apple.com/documentation/usernotifications/sending-notification-requests-to-apns,
// https://developer.apple.com/documentation/usernotifications/pushing-background-updates-to-your-app;
// providers.md §2.2).
func TestPushTypeDefault(t *testing.T) {
	ts, got := capture(t)
	c := newClient(t, config(t, ts))
	for _, tc := range []struct {
		payload            string
		pushType, priority string
	}{
		{`{"aps":{"alert":"hi"}}`, "alert", ""},
		{`{"aps":{"badge":3}}`, "alert", ""},
		{`{}`, "alert", ""},
		{`{"aps":{"content-available":1},"sync":7}`, "background", "5"},
		{`{"headers":{"apns-priority":1},"aps":{"content-available":1}}`, "background", "1"},
		{`{"aps":{"content-available":1,"alert":"hi"}}`, "alert", ""},
		{`{"headers":{"apns-push-type":"background"},"aps":{"content-available":1}}`, "background", "5"},
		{`{"headers":{"apns-push-type":"alert","apns-priority":"5"},"aps":{"content-available":1}}`, "alert", "5"},
	} {
		m := message()
		m.Payload = json.RawMessage(tc.payload)
		if _, err := c.Send(t.Context(), m); err != nil {
			t.Fatalf("%s: %v", tc.payload, err)
		}
		r := <-got
		if pt, pr := r.header.Get("apns-push-type"), r.header.Get("apns-priority"); pt != tc.pushType || pr != tc.priority {
			t.Errorf("%s: apns-push-type %q, apns-priority %q; want %q, %q", tc.payload, pt, pr, tc.pushType, tc.priority)
		}
	}
}

// TestTopicSuffix: push types whose topic is the bundle ID with a suffix
// get it appended, once. Apple, apns-push-type: voip "your app's bundle ID
// with .voip appended", complication ".complication", fileprovider
// ".pushkit.fileprovider", liveactivity ".push-type.liveactivity",
// location ".location-query", pushtotalk ".voip-ptt", widgets
// ".push-type.widgets"; alert and background the bundle ID itself
// (https://developer.apple.com/documentation/usernotifications/sending-notification-requests-to-apns;
// providers.md §2.2).
func TestTopicSuffix(t *testing.T) {
	ts, got := capture(t)
	c := newClient(t, config(t, ts))
	for _, tc := range []struct {
		pushType, topic, want string
	}{
		{"alert", "", topic},
		{"background", "", topic},
		{"voip", "", topic + ".voip"},
		{"voip", topic + ".voip", topic + ".voip"},
		{"complication", "", topic + ".complication"},
		{"fileprovider", "", topic + ".pushkit.fileprovider"},
		{"liveactivity", "", topic + ".push-type.liveactivity"},
		{"liveactivity", "com.example.other", "com.example.other.push-type.liveactivity"},
		{"location", "", topic + ".location-query"},
		{"pushtotalk", "", topic + ".voip-ptt"},
		{"widgets", "", topic + ".push-type.widgets"},
	} {
		h := map[string]any{"apns-push-type": tc.pushType}
		if tc.pushType == "background" {
			h["apns-priority"] = "5"
		}
		if tc.topic != "" {
			h["apns-topic"] = tc.topic
		}
		p, _ := json.Marshal(map[string]any{"headers": h, "aps": map[string]any{"content-available": 1}})
		m := message()
		m.Payload = p
		if _, err := c.Send(t.Context(), m); err != nil {
			t.Fatalf("%s: %v", p, err)
		}
		if r := <-got; r.header.Get("apns-topic") != tc.want {
			t.Errorf("push type %s, topic %q: apns-topic %q, want %q", tc.pushType, tc.topic, r.header.Get("apns-topic"), tc.want)
		}
	}
}

// TestBackgroundPriority10: a background push with apns-priority 10 is
// refused before sending, as Permanent with a reason that says so. Apple,
// apns-push-type background: "Always use priority 5. Using priority 10 is
// an error"
// (https://developer.apple.com/documentation/usernotifications/sending-notification-requests-to-apns;
// providers.md §2.2).
func TestBackgroundPriority10(t *testing.T) {
	var n channeltest.Counter
	ts := h2(t, &n)
	c := newClient(t, config(t, ts))
	for _, p := range []string{
		`{"headers":{"apns-push-type":"background","apns-priority":"10"},"aps":{"content-available":1}}`,
		`{"headers":{"apns-priority":10},"aps":{"content-available":1}}`,
	} {
		m := message()
		m.Payload = json.RawMessage(p)
		e := sendErr(t, c, m)
		if e.Class != channels.Permanent || e.Code != "invalid-payload" || e.Status != 0 ||
			!strings.Contains(e.Detail, "priority 10") || !strings.Contains(e.Detail, "background") {
			t.Errorf("%s: %v; want Permanent invalid-payload naming background and priority 10", p, e)
		}
	}
	n.CheckNone(t)
}
