package channels

import (
	"net/http"
	"strconv"
	"strings"
	"time"
)

// ParseRetryAfter returns the delay a Retry-After header value asks for at
// now: delta-seconds, or an HTTP-date in any of the three forms RFC 9110
// §10.2.3 allows (IMF-fixdate, RFC 850, asctime; parsed by http.ParseTime).
// It returns 0 for an empty or invalid value and for a date not after now;
// callers clamp the result to their own range.
func ParseRetryAfter(v string, now time.Time) time.Duration {
	v = strings.TrimSpace(v)
	if v == "" {
		return 0
	}
	if n, err := strconv.ParseUint(v, 10, 64); err == nil {
		const maxSecs = uint64(1<<63-1) / uint64(time.Second)
		return time.Duration(min(n, maxSecs)) * time.Second
	}
	if t, err := http.ParseTime(v); err == nil && t.After(now) {
		return t.Sub(now)
	}
	return 0
}

// ParseResetEpoch returns the delay until a reset time given as Unix epoch
// seconds (SendGrid's X-RateLimit-Reset), or 0 for an empty, invalid or past
// value.
func ParseResetEpoch(v string, now time.Time) time.Duration {
	n, err := strconv.ParseInt(strings.TrimSpace(v), 10, 64)
	if err != nil || n <= 0 {
		return 0
	}
	const maxEpoch = (1<<63 - 1) / int64(time.Second)
	if n > maxEpoch {
		n = maxEpoch
	}
	if t := time.Unix(n, 0); t.After(now) {
		return t.Sub(now)
	}
	return 0
}
