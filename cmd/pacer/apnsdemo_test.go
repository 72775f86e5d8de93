package main

import (
	"encoding/json"
	"fmt"
	"testing"

	"github.com/pacerhq/pacer/channels"
)

// TestAPNsDemoFakeHasNoTopicLimit: APNs throttles per device token
// ("too many requests were made consecutively to the same device token")
// and publishes no limit per app (apns-topic), so the demo's fake APNs must
// not throttle an app as a whole: five notifications of one app to five
// devices at a demo rate of 1/s with a burst of 1 are all accepted.
// Source: https://developer.apple.com/documentation/usernotifications/handling-notification-responses-from-apns
func TestAPNsDemoFakeHasNoTopicLimit(t *testing.T) {
	ch := channelRow(t, "apns")
	f, err := ch.demo(t.Context(), 1, 1, 1)
	if f != nil {
		defer f.close()
	}
	if err != nil {
		t.Fatal(err)
	}
	for j := range 5 {
		m := channels.Message{ID: fmt.Sprint("n", j), Key: f.keys[0], To: f.to(j), Payload: json.RawMessage(f.payload(j))}
		if _, err := f.sender.Send(t.Context(), m); err != nil {
			t.Fatalf("notification %d to its own device: %v", j, err)
		}
	}
	if st := f.stats()[f.keys[0]]; st.Delivered != 5 || st.Throttled != 0 {
		t.Errorf("fake stats %+v; want 5 delivered, none throttled", st)
	}
}
