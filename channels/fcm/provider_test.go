package fcm_test

// Tests built from FCM's documented bodies for the defects a review of the
// adapter against the FCM documentation found.

import (
	"encoding/json"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/pacerhq/pacer/channels"
	"github.com/pacerhq/pacer/channels/fcm"
	"github.com/pacerhq/pacer/channels/fcm/fcmtest"
	"github.com/pacerhq/pacer/channels/internal/channeltest"
)

// TestProjectNamedDeviceThrottlesProject: the #719 project-quota 429 of a
// project whose ID contains "device" (smartdevice-prod) is a project
// throttle with FCM's 1-minute minimum: the adapter reads the ErrorInfo's
// quota_unit dimension ("1/min/{project}"), never a substring.
// Sources: https://firebase.google.com/docs/reference/fcm/rest/v1/ErrorCode
// (QUOTA_EXCEEDED: "exponential backoff with a minimum initial delay of 1
// minute"), https://github.com/firebase/firebase-admin-go/issues/719.
func TestProjectNamedDeviceThrottlesProject(t *testing.T) {
	ts := channeltest.Respond(t, http.StatusTooManyRequests, channeltest.ReadTestdata(t, "RESOURCE_EXHAUSTED_smartdevice.json"))
	m := message()
	m.Key = "smartdevice-prod"
	_, err := newClient(t, ts.URL).Send(t.Context(), m)
	e := checkErr(t, err)
	if e.Class != channels.Throttle || e.Scope != channels.ScopeKey || e.RetryAfter != fcm.QuotaCooldown {
		t.Errorf("got class=%v scope=%v RetryAfter=%v; want throttle key %v", e.Class, e.Scope, e.RetryAfter, fcm.QuotaCooldown)
	}
}

// TestQuotaExceededNeedsTwoTokens: FCM answers one QUOTA_EXCEEDED body for
// a project's quota and a device's, and documents no field that tells
// them apart (its QuotaFailure's fields are not documented). A refusal of
// one token throttles that token alone, however often it repeats and
// whatever a QuotaFailure says, without the project's minute; a second,
// different token of the project refused within fcm.QuotaWindow throttles
// the project for at least fcm.QuotaCooldown. Another project counts apart.
// Sources: https://firebase.google.com/docs/reference/fcm/rest/v1/ErrorCode
// (QUOTA_EXCEEDED), https://firebase.google.com/docs/cloud-messaging/throttling-and-quotas.
func TestQuotaExceededNeedsTwoTokens(t *testing.T) {
	// A QuotaFailure whose subject looks like a device names nothing the
	// adapter may trust: it decides no scope.
	body := `{"error":{"code":429,"message":"Resource has been exhausted (e.g. check quota).","status":"RESOURCE_EXHAUSTED",
  "details":[{"@type":"type.googleapis.com/google.firebase.fcm.v1.FcmError","errorCode":"QUOTA_EXCEEDED"},
    {"@type":"type.googleapis.com/google.rpc.QuotaFailure","violations":[{"subject":"device:tok-a"}]}]}}`
	c := newClient(t, channeltest.Respond(t, http.StatusTooManyRequests, body).URL)
	for i, s := range []struct {
		key, to string
		scope   channels.Scope
		retry   time.Duration
	}{
		{project, "tok-a", channels.ScopePair, 0},
		{project, "tok-a", channels.ScopePair, 0}, // the same device again
		{"other-project", "tok-b", channels.ScopePair, 0},
		{project, "tok-b", channels.ScopeKey, fcm.QuotaCooldown}, // two tokens of one project
	} {
		m := message()
		m.Key, m.To = s.key, s.to
		_, err := c.Send(t.Context(), m)
		if e := checkErr(t, err); e.Class != channels.Throttle || e.Scope != s.scope || e.RetryAfter != s.retry {
			t.Errorf("send %d (%s, %s): class=%v scope=%v RetryAfter=%v; want throttle %v %v",
				i, s.key, s.to, e.Class, e.Scope, e.RetryAfter, s.scope, s.retry)
		}
	}
}

// TestThirdPartyAuthOnlyFailsItsMessage: THIRD_PARTY_AUTH_ERROR means the
// project's APNs certificate or key, or web push key, is invalid: iOS and
// web targets fail, Android ones do not. The adapter makes it Permanent for
// the message (dead-lettered, replayable once the key is fixed), not a
// Halt of the project, and the project's Android sends go on.
// Source: https://firebase.google.com/docs/reference/fcm/rest/v1/ErrorCode
// (THIRD_PARTY_AUTH_ERROR: "APNs certificate or web push auth key was
// invalid or missing").
func TestThirdPartyAuthOnlyFailsItsMessage(t *testing.T) {
	fake := fcmtest.NewServer(fcmtest.Config{})
	defer fake.Close()
	const ios, android = "ios-instance-token-1", "android-instance-token-1"
	fake.FailThirdPartyAuth(ios)
	c := newFakeClient(t, fake, "")
	m := message()
	m.To = ios
	_, err := c.Send(t.Context(), m)
	e := checkErr(t, err, ios)
	if e.Class != channels.Permanent || e.Code != "THIRD_PARTY_AUTH_ERROR" || e.Status != http.StatusUnauthorized {
		t.Errorf("iOS send: %+v; want permanent THIRD_PARTY_AUTH_ERROR 401", e)
	}
	m.To = android
	if _, err := c.Send(t.Context(), m); err != nil {
		t.Errorf("Android send of the same project after the iOS failure: %v", err)
	}
	if st := fake.Stats()[project]; st.ThirdPartyAuth != 1 || st.Delivered != 1 {
		t.Errorf("fake stats %+v; want 1 third-party auth failure, 1 delivered", st)
	}
}

// TestPayloadLimit: FCM takes at most 4096 bytes of payload (keys and
// values) and counts a refused request against the project quota, so the
// adapter refuses a larger message without a request. 4096 bytes exactly
// goes out and the fake, which enforces the same limit, accepts it.
// Sources: https://firebase.google.com/docs/reference/fcm/rest/v1/ErrorCode
// (INVALID_ARGUMENT, "Message too big": "4096 bytes for most messages ...
// This includes both the keys and the values") and
// https://firebase.google.com/docs/cloud-messaging/throttling-and-quotas
// ("Client errors (HTTP status code 400-499) are counted").
func TestPayloadLimit(t *testing.T) {
	fake := fcmtest.NewServer(fcmtest.Config{})
	defer fake.Close()
	c := newFakeClient(t, fake, "")
	// notification {"title":"Hi"}: 5+2 bytes; data {"k": v}: 1+len(v).
	payload := func(n int) json.RawMessage {
		v := strings.Repeat("x", n-5-2-1)
		return json.RawMessage(`{"notification":{"title":"Hi"},"data":{"k":"` + v + `"}}`)
	}
	m := message()
	m.Payload = payload(fcm.MaxPayload)
	if _, err := c.Send(t.Context(), m); err != nil {
		t.Fatalf("%d bytes: %v", fcm.MaxPayload, err)
	}
	m.Payload = payload(fcm.MaxPayload + 1)
	_, err := c.Send(t.Context(), m)
	if e := checkErr(t, err); e.Class != channels.Permanent || e.Code != fcm.CodePayloadTooLarge || e.Status != 0 {
		t.Errorf("%d bytes: %+v; want permanent %s without a request", fcm.MaxPayload+1, e, fcm.CodePayloadTooLarge)
	}
	if channels.MaybeAccepted(err) {
		t.Error("MaybeAccepted = true for a message never sent")
	}
	if st := fake.Stats()[project]; st.Delivered != 1 || st.Invalid != 0 || len(fake.Arrivals()) != 1 {
		t.Errorf("fake saw %+v, %d arrivals; want only the 4096-byte message", st, len(fake.Arrivals()))
	}
}
