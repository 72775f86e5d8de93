package consumer_test

import (
	"fmt"
	"testing"

	"github.com/pacerhq/pacer/bucket"
)

// TestRecipientLimitBucketCalls: a campaign whose every message goes to a
// different device of one key with a recipient bucket (FCM's per-device
// limit) asks Redis about once per message. Such a key reserves both
// buckets per message, looking only as far ahead as the key's burst lasts
// (100 ms here); when a second of senders waited for those few slots, the
// ones beyond them were refused and asked again every slot interval, about
// 50 bucket calls per message delivered, and on a busy machine the CPU
// they took woke the holders too late to use their slots: FCM's demo ran
// at half its rate.
func TestRecipientLimitBucketCalls(t *testing.T) {
	h := newHarness(t, nil)
	h.cfg.Limit = bucket.Limit{PerSecond: 100, Burst: 10}
	h.cfg.RecipientLimit = bucket.Limit{PerSecond: 4.0 / 3, Burst: 160} // fcm.DeviceLimit
	const n = 300
	values := make([]string, n)
	for i := range values {
		values[i] = fmt.Sprintf(`{"id":"m%d","key":"k1","to":"device-%d"}`, i, i)
	}
	h.produce(values...)
	s := h.sender
	h.run(func() bool {
		s.mu.Lock()
		defer s.mu.Unlock()
		return len(s.success) == n
	})
	delivered := h.counter("pacer_delivered_total")
	calls := h.counter("pacer_bucket_calls_total")
	if delivered != n {
		t.Fatalf("delivered %v, want %d", delivered, n)
	}
	// Each message takes one reservation; a slot lapsed on a loaded
	// machine, or a sender that came just before the next slot entered
	// reach, takes another.
	if per := calls / delivered; per > 3 {
		t.Errorf("%.0f bucket calls for %d messages (%.1f per message), want at most 3 per message", calls, n, per)
	}
}
