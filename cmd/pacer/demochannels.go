package main

import (
	"fmt"
	"time"

	"github.com/pacerhq/pacer/channels"
)

// fakeStats is what the demo reads from any fake provider, per pacing key.
type fakeStats struct {
	Delivered, Duplicates, Throttled, Max1s int
	First, Last                             time.Time
}

// demoFake is one channel's fake provider, the adapter pointed at it, and
// the campaign the demo sends through it.
type demoFake struct {
	url     string
	sender  channels.Sender
	keys    []string                    // pacing keys of the campaign
	to      func(j int) string          // recipient of the campaign's message j (unique per message)
	payload func(i int) string          // JSON payload of message i of a key
	stats   func() map[string]fakeStats // per pacing key
	close   func()
}

// line returns the envelope of message i of key n, one of messages per key.
func (d *demoFake) line(n, i, messages int) string {
	return fmt.Sprintf(`{"id":"demo-%d-%d","key":%q,"to":%q,"campaign":"demo","payload":%s}`,
		n+1, i+1, d.keys[n], d.to(n*messages+i), d.payload(i))
}

// demoKeys returns n pacing keys made by format from 1, 2, ...
func demoKeys(n int, format string) []string {
	keys := make([]string, n)
	for i := range keys {
		keys[i] = fmt.Sprintf(format, i+1)
	}
	return keys
}

// statsOf converts a fake provider's per-key statistics with conv.
func statsOf[T any](m map[string]T, conv func(T) fakeStats) map[string]fakeStats {
	out := make(map[string]fakeStats, len(m))
	for k, v := range m {
		out[k] = conv(v)
	}
	return out
}
