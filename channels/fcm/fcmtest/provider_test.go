package fcmtest_test

import (
	"net/http"
	"strings"
	"testing"

	"github.com/pacerhq/pacer/channels/fcm/fcmtest"
)

// TestClientErrorsCountAgainstQuota: FCM's project quota counts client
// errors (every 4xx but 429) like messages, so a project that spent its
// quota on 400s is throttled; the fake does the same, without slack.
// Source: https://firebase.google.com/docs/cloud-messaging/throttling-and-quotas
// ("Client errors (HTTP status code 400-499) are counted (excluding 429s)").
func TestClientErrorsCountAgainstQuota(t *testing.T) {
	s := fcmtest.New(fcmtest.Config{Token: bearer, Rate: 0.001, Burst: 3, Unregistered: []string{"gone"}})
	if w := post(s, "p", bearer, `{"message":{}}`); w.Code != http.StatusBadRequest {
		t.Fatalf("invalid body: HTTP %d %s", w.Code, w.Body)
	}
	if w := post(s, "p", bearer, msg("gone", "a")); w.Code != http.StatusNotFound {
		t.Fatalf("dead token: HTTP %d %s", w.Code, w.Body)
	}
	if w := post(s, "p", bearer, msg("dev", "b")); w.Code != http.StatusOK {
		t.Fatalf("third message of a burst of 3: HTTP %d %s", w.Code, w.Body)
	}
	if w := post(s, "p", bearer, msg("dev", "c")); w.Code != http.StatusTooManyRequests {
		t.Errorf("fourth message after a 400 and a 404 took the burst: HTTP %d; want 429", w.Code)
	}
	if st := s.Stats()["p"]; st.Invalid != 1 || st.Unregistered != 1 || st.Delivered != 1 || st.Throttled != 1 {
		t.Errorf("stats = %+v", st)
	}
}

// TestPayloadTooBig: more than 4096 bytes of data and notification keys and
// values is answered 400 INVALID_ARGUMENT, with the body recorded from the
// live API (no details), and counted against the quota.
// Source: https://firebase.google.com/docs/reference/fcm/rest/v1/ErrorCode
// (INVALID_ARGUMENT, "Message too big").
func TestPayloadTooBig(t *testing.T) {
	s := fcmtest.New(fcmtest.Config{Token: bearer})
	body := func(n int) string { // data {"k": v}: 1 + len(v) bytes
		return `{"message":{"token":"dev","data":{"k":"` + strings.Repeat("x", n-1) + `"}}}`
	}
	if w := post(s, "p", bearer, body(fcmtest.MaxPayload)); w.Code != http.StatusOK {
		t.Fatalf("%d bytes: HTTP %d %s", fcmtest.MaxPayload, w.Code, w.Body)
	}
	w := post(s, "p", bearer, body(fcmtest.MaxPayload+1))
	b := decodeError(t, w)
	if w.Code != http.StatusBadRequest || b.Error.Status != "INVALID_ARGUMENT" || b.Error.Message != "Request contains an invalid argument." {
		t.Errorf("%d bytes: HTTP %d %s", fcmtest.MaxPayload+1, w.Code, w.Body)
	}
	if st := s.Stats()["p"]; st.Invalid != 1 || st.Delivered != 1 {
		t.Errorf("stats = %+v", st)
	}
}

// TestOutage: during an outage the fake answers 503 UNAVAILABLE (with
// Retry-After when configured) or 500 INTERNAL, with the FcmError FCM
// documents, and those sends take nothing of the quota.
// Source: https://firebase.google.com/docs/reference/fcm/rest/v1/ErrorCode
// (UNAVAILABLE 503, INTERNAL 500).
func TestOutage(t *testing.T) {
	s := fcmtest.New(fcmtest.Config{Token: bearer, Rate: 0.001, Burst: 1, RetryAfter: 10e9})
	for _, c := range []struct {
		status int
		code   string
	}{{503, "UNAVAILABLE"}, {500, "INTERNAL"}} {
		s.SetOutage("p", c.status)
		w := post(s, "p", bearer, msg("dev", "a"))
		b := decodeError(t, w)
		if w.Code != c.status || b.Error.Status != c.code || detail(b, "FcmError")["errorCode"] != c.code {
			t.Errorf("outage %d: HTTP %d %s", c.status, w.Code, w.Body)
		}
		if ra := w.Header().Get("Retry-After"); (c.status == 503) != (ra == "10") {
			t.Errorf("outage %d: Retry-After %q", c.status, ra)
		}
	}
	if w := post(s, "q", bearer, msg("dev", "a")); w.Code != http.StatusOK {
		t.Errorf("another project during p's outage: HTTP %d", w.Code)
	}
	s.SetOutage("p", 0)
	if w := post(s, "p", bearer, msg("dev", "a")); w.Code != http.StatusOK {
		t.Errorf("after the outage, the burst of 1 is whole: HTTP %d %s", w.Code, w.Body)
	}
	if st := s.Stats()["p"]; st.ServerErrors != 2 || st.Delivered != 1 {
		t.Errorf("stats = %+v", st)
	}
}

// TestThirdPartyAuth: tokens of iOS or web instances whose project's
// APNs or web push credentials are invalid get 401 THIRD_PARTY_AUTH_ERROR
// with an ApnsError, other tokens of the project are accepted, and the
// failures count against the quota (a 4xx).
// Source: https://firebase.google.com/docs/reference/fcm/rest/v1/ErrorCode
func TestThirdPartyAuth(t *testing.T) {
	s := fcmtest.New(fcmtest.Config{Token: bearer, Rate: 0.001, Burst: 2})
	s.FailThirdPartyAuth("ios")
	w := post(s, "p", bearer, msg("ios", "a"))
	b := decodeError(t, w)
	if w.Code != http.StatusUnauthorized || detail(b, "FcmError")["errorCode"] != "THIRD_PARTY_AUTH_ERROR" || detail(b, "ApnsError") == nil {
		t.Errorf("iOS token: HTTP %d %s", w.Code, w.Body)
	}
	if w := post(s, "p", bearer, msg("android", "b")); w.Code != http.StatusOK {
		t.Errorf("Android token: HTTP %d %s", w.Code, w.Body)
	}
	if w := post(s, "p", bearer, msg("android", "c")); w.Code != http.StatusTooManyRequests {
		t.Errorf("third send of a burst of 2 after a 401: HTTP %d; want 429", w.Code)
	}
	if st := s.Stats()["p"]; st.ThirdPartyAuth != 1 || st.Delivered != 1 {
		t.Errorf("stats = %+v", st)
	}
}
