// Package fakeprovider holds the machinery the fake providers
// (channels/apns/apnstest, channels/fcm/fcmtest, channels/sendgrid/sendgridtest
// and channels/whatsapp/whatsapptest) share: a per-key token bucket
// ([Limiter], [Bucket]) that decides which requests a fake throttles, a
// recorder ([Stats]) that sums up what each key sent as [KeyStats], and the
// GET /_stats endpoint ([StatsHandler]) with its client ([FetchStats]).
//
// Rates are in requests per second and bursts in requests; a rate of 0 is
// unlimited. Every method that depends on time takes it as a now argument,
// so tests step time with values. Nothing here locks: each fake holds its
// own mutex around a request's bucket decision and its recording, so that
// arrival times never go backwards.
package fakeprovider

import (
	"context"
	"time"
)

// Sleep waits d, or until ctx is done, and reports whether the whole of d
// passed. It returns true at once if d <= 0. The fakes use it for
// Config.Latency.
func Sleep(ctx context.Context, d time.Duration) bool {
	if d <= 0 {
		return true
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-ctx.Done():
		return false
	}
}
