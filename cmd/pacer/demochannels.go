package main

import (
	"encoding/json"
	"fmt"
	"time"

	"github.com/pacerhq/pacer/channels"
)

// fakeStats is what the demo reads from any fake provider, per pacing key:
// the fields of its JSON form (GET /_stats) that every fake has.
type fakeStats struct {
	Delivered  int       `json:"delivered"`
	Duplicates int       `json:"duplicates"`
	Throttled  int       `json:"throttled"`
	Max1s      int       `json:"max_1s"`
	First      time.Time `json:"first"`
	Last       time.Time `json:"last"`
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

// statsOf returns a function reading a fake provider's per-key statistics
// through their JSON form, the one GET /_stats serves, which every fake's
// shares.
func statsOf[K any](stats func() map[string]K) func() map[string]fakeStats {
	return func() map[string]fakeStats {
		b, err := json.Marshal(stats())
		var m map[string]fakeStats
		if err == nil {
			err = json.Unmarshal(b, &m)
		}
		if err != nil { // the fakes' statistics are plain numbers and times
			panic("demo: fake statistics do not round-trip JSON: " + err.Error())
		}
		return m
	}
}
