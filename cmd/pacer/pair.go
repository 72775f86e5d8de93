package main

import (
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/pacerhq/pacer/pacer/ledger"
)

// readPair reads a channel's pair limit: prefix+"INTERVAL" (a Go duration,
// default r.every; 0 = off) at prefix+"BURST" (default r.limit.Burst), for
// a channel whose recipient bucket has an interval (WhatsApp's pair rate
// limit: 1 message per 6 s, up to 45 in a burst, answered 131056 beyond;
// Meta, "Pair rate limits",
// https://developers.facebook.com/documentation/business-messaging/whatsapp/about-the-platform).
// The zero Pair for a channel without one. A bad interval is an error
// naming the variable; a bad burst is reported by the recipient bucket's
// own check (its default stands in here).
func readPair(prefix string, r *recipientBucket, get func(name, def string) string) (ledger.Pair, error) {
	if r.every <= 0 {
		return ledger.Pair{}, nil
	}
	v := get(prefix+"INTERVAL", r.every.String())
	every, err := time.ParseDuration(strings.TrimSpace(v))
	if err != nil || every < 0 || (every > 0 && every < time.Millisecond) {
		return ledger.Pair{}, &configError{prefix + "INTERVAL", "must be a duration of at least 1ms, or 0 for no pair limit (e.g. 6s)"}
	}
	if every == 0 {
		return ledger.Pair{}, nil
	}
	burst, err := strconv.Atoi(strings.TrimSpace(get(prefix+"BURST", strconv.Itoa(r.limit.Burst))))
	if err == nil && burst < 0 { // 0 and non-numbers are said by the recipient bucket's check
		return ledger.Pair{}, &configError{prefix + "BURST", fmt.Sprintf("must be at least 1 (the pair limit's burst; default %d)", r.limit.Burst)}
	}
	if err != nil || burst < 1 {
		burst = r.limit.Burst
	}
	return ledger.Pair{Every: every, Burst: burst}, nil
}
