// Package suppress keeps the recipients a pacing key must not send to: a
// device token the provider called dead (APNs 410 Unregistered, FCM
// UNREGISTERED), and the reasons status webhooks report (WhatsApp 131026
// and 131049, SendGrid bounces, drops, spam reports and unsubscribes), each
// for as long as its reason says ([Reason.Default]).
//
// A suppression belongs to one pacing key of one channel: the sender whose
// credential the provider scopes it by (an APNs token belongs to an app,
// the bundle ID; an FCM token to a project; the credentials directory holds
// one credential per pacing key). Its entries live in the key's Redis
// Cluster slot ([bucket.Keys].Suppressed), so the idempotency ledger's
// claim, made before every send, reads them in the same script call
// (ledger.Recipient): checking a message costs no Redis round trip of its
// own.
//
// No address or token is written: an entry is named by [Hash] of the
// recipient. Memory (MEMORY USAGE on redis-server 7.0, 100,000 entries):
// 98.5 bytes per entry until removed (one hash field), 234 per entry that
// expires (a hash field and a member of the key's expiry index); an
// expired entry is removed by the next [Store.Add] to its key.
package suppress

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"
)

// Reason is why a recipient is suppressed: one of [Reasons], so a metric
// labelled by it stays bounded.
type Reason string

const (
	// Unregistered: APNs 410 Unregistered or ExpiredToken, FCM
	// UNREGISTERED: the device token is dead for the app or project.
	// Until removed (APNs: until the app registers it again after
	// [Entry.At], see [Store.Registered]).
	Unregistered Reason = "unregistered"
	// Undeliverable: WhatsApp 131026, the number cannot receive the
	// message. 7 days by default.
	Undeliverable Reason = "undeliverable"
	// MarketingLimit: WhatsApp 131049, the user's marketing message limit:
	// marketing messages only, for 24 h.
	MarketingLimit Reason = "marketing-limit"
	// Bounce, Dropped, SpamReport, Unsubscribe: SendGrid's Event Webhook
	// events of the same names. Until removed.
	Bounce      Reason = "bounce"
	Dropped     Reason = "dropped"
	SpamReport  Reason = "spamreport"
	Unsubscribe Reason = "unsubscribe"
	// Manual: an operator's (`pacer suppress add`). Until removed.
	Manual Reason = "manual"
)

// Reasons lists every [Reason].
var Reasons = []Reason{Unregistered, Undeliverable, MarketingLimit, Bounce, Dropped, SpamReport, Unsubscribe, Manual}

// ParseReason returns the Reason named s, or an error listing the known ones.
func ParseReason(s string) (Reason, error) {
	for _, r := range Reasons {
		if string(r) == s {
			return r, nil
		}
	}
	names := make([]string, len(Reasons))
	for i, r := range Reasons {
		names[i] = string(r)
	}
	return "", fmt.Errorf("suppress: unknown reason %q (one of %s)", s, strings.Join(names, ", "))
}

// Default is how long r suppresses a recipient when its event says no
// more: 7 days for [Undeliverable] (Meta documents no duration for 131026;
// a week lets a number that comes back be reached again), 24 h for
// [MarketingLimit] (Meta's per-user marketing window), 0 (until removed)
// for every other reason.
func (r Reason) Default() time.Duration {
	switch r {
	case Undeliverable:
		return 7 * 24 * time.Hour
	case MarketingLimit:
		return 24 * time.Hour
	}
	return 0
}

// MarketingOnly reports whether r suppresses marketing messages only.
func (r Reason) MarketingOnly() bool { return r == MarketingLimit }

// Hash names a recipient (a device token, phone number or address) in
// Redis: the first 12 bytes of the SHA-256 of its [Canonical] form in hex
// (24 characters), so no address or token is stored. 96 bits: two of a
// billion recipients collide with a chance of about 1 in 10^10. A hash of
// a phone number or address is not a secret: anyone can hash every number
// and compare; it keeps them out of Redis dumps and logs, no more.
func Hash(to string) string {
	h := sha256.Sum256([]byte(Canonical(to)))
	return hex.EncodeToString(h[:12])
}

// Canonical is the one spelling of a recipient its suppression is kept
// under, so every spelling of it is refused alike: surrounding white space
// removed; a phone number without its leading '+' (WhatsApp's webhooks say
// 15551234567 where an envelope may say +15551234567); an email address
// in lower case (providers match addresses without regard to case). A
// device token is kept as it is (FCM tokens are case-sensitive).
func Canonical(to string) string {
	to = strings.TrimSpace(to)
	if d, ok := strings.CutPrefix(to, "+"); ok && d != "" && strings.Trim(d, "0123456789") == "" {
		return d
	}
	if strings.Contains(to, "@") {
		return strings.ToLower(to)
	}
	return to
}

// MaxRecipient is the longest recipient [RecipientHash] takes, in bytes
// (an email address is at most 254, a device token a few hundred).
const MaxRecipient = 1024

// HashPrefix starts a recipient given by its [Hash] rather than itself
// (what `pacer suppress export` writes, since only hashes are stored).
const HashPrefix = "hash:"

// RecipientHash returns the hash of recipient: [Hash] of it, or the hash
// it names after [HashPrefix] (24 lower-case hex digits, else an error).
func RecipientHash(recipient string) (string, error) {
	if len(recipient) >= len(HashPrefix) && strings.EqualFold(recipient[:len(HashPrefix)], HashPrefix) {
		recipient = HashPrefix + strings.ToLower(recipient[len(HashPrefix):])
	}
	if len(recipient) > MaxRecipient {
		return "", fmt.Errorf("suppress: recipient of %d bytes, at most %d", len(recipient), MaxRecipient)
	}
	h, ok := strings.CutPrefix(recipient, HashPrefix)
	if !ok {
		if recipient == "" {
			return "", errors.New("suppress: empty recipient")
		}
		return Hash(recipient), nil
	}
	if len(h) != 24 || strings.Trim(h, "0123456789abcdef") != "" {
		return "", fmt.Errorf("suppress: %q is not %s followed by 24 lower-case hex digits", recipient, HashPrefix)
	}
	return h, nil
}

// Entry is one suppressed recipient of a pacing key.
type Entry struct {
	Hash    string    // the recipient's [Hash]
	Reason  Reason    // why
	Expires time.Time // when it ends; zero: until removed (ms precision)
	// At is when the provider saw the reason (APNs's 410 timestamp);
	// zero if it did not say (ms precision).
	At time.Time
}

// New returns the entry of reason for recipient hash h, seen by the
// provider at at (zero if unknown), expiring reason.Default() after now.
func New(h string, reason Reason, at, now time.Time) Entry {
	e := Entry{Hash: h, Reason: reason, At: at}
	if d := reason.Default(); d > 0 {
		e.Expires = now.Add(d)
	}
	return e
}

// Live reports whether e still suppresses at now.
func (e Entry) Live(now time.Time) bool { return e.Expires.IsZero() || now.Before(e.Expires) }

// value is the entry as lua/ledger.lua reads it:
// "<expires_ms> <a|m> <reason> <at_ms>".
func (e Entry) value() string {
	scope := "a"
	if e.Reason.MarketingOnly() {
		scope = "m"
	}
	return strconv.FormatInt(ms(e.Expires), 10) + " " + scope + " " + string(e.Reason) + " " + strconv.FormatInt(ms(e.At), 10)
}

// ms is t in Unix ms, 0 for the zero time.
func ms(t time.Time) int64 {
	if t.IsZero() {
		return 0
	}
	return max(t.UnixMilli(), 1)
}

// fromMs is the time of Unix ms v, the zero time for 0.
func fromMs(v int64) time.Time {
	if v == 0 {
		return time.Time{}
	}
	return time.UnixMilli(v).UTC()
}

// parseEntry reads the value v of hash h.
func parseEntry(h, v string) (Entry, error) {
	f := strings.Fields(v)
	if len(f) != 4 {
		return Entry{}, fmt.Errorf("suppress: entry %s: %q is not \"<expires_ms> <a|m> <reason> <at_ms>\"", h, v)
	}
	exp, err1 := strconv.ParseInt(f[0], 10, 64)
	at, err2 := strconv.ParseInt(f[3], 10, 64)
	if err := errors.Join(err1, err2); err != nil {
		return Entry{}, fmt.Errorf("suppress: entry %s: %w", h, err)
	}
	return Entry{Hash: h, Reason: Reason(f[2]), Expires: fromMs(exp), At: fromMs(at)}, nil
}
