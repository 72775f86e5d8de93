package sendgrid

import (
	"net/http"
	"strings"
	"time"

	"github.com/pacerhq/pacer/channels"
)

// BlockCooldown is the RetryAfter of an HTTP 403 "temporarily blocked ...
// due to repeated bad requests" answer, unless the response names a later
// time. SendGrid gives no duration for the API; its SMTP error page calls
// the same block "a temporary block of a few minutes", so 15 minutes leaves
// a margin without parking the key for hours.
//
// Source: https://www.twilio.com/docs/sendgrid/for-developers/sending-email/smtp-errors-and-troubleshooting
// (550 "You are temporarily blocked from sending emails due to repeated bad requests.").
const BlockCooldown = 15 * time.Minute

// statuses maps a Mail Send HTTP status to its class, as in the project's
// providers.md §4.3. SendGrid has no error codes: the status decides, and
// only a 403 is split by its message (see [classify]). A status not listed
// is classified by its range in [classify].
//
// Sources (providers.md §7):
//   - [S-RESP] status codes, including both 403 messages and 406:
//     https://static1.twilio.com/docs/sendgrid/api-reference/how-to-use-the-sendgrid-v3-api/responses
//   - [S-ERR] error body, 401 and 451:
//     https://www.twilio.com/docs/sendgrid/api-reference/how-to-use-the-sendgrid-v3-api/errors
//   - [S-MSE] 400 validation errors of Mail Send:
//     https://twilio.com/docs/sendgrid/api-reference/mail-send/errors
//   - [S-RL] 429 and X-RateLimit-Reset as Unix epoch seconds:
//     https://www.twilio.com/docs/sendgrid/api-reference/how-to-use-the-sendgrid-v3-api/rate-limits
//   - [S-XMID] 202 and X-Message-Id: https://sendgrid.com/docs/glossary/x-message-id/
//   - [3P-SG] 413 payload too large: https://www.withone.ai/knowledge/sendgrid/
var statuses = map[int]channels.Class{
	// 202 Accepted (and 200 in sandbox mode) is success; see Client.Send.

	// Throttle the API key until X-RateLimit-Reset (epoch seconds). [S-RL]
	http.StatusTooManyRequests: channels.Throttle,

	// Transient: nothing to do with our rate. SendGrid documents only 500;
	// 502, 503 and 504 come from its edge and load balancers (UNCONFIRMED
	// in the docs, providers.md §4.3).
	http.StatusInternalServerError: channels.Transient, // [S-RESP]
	http.StatusBadGateway:          channels.Transient,
	http.StatusServiceUnavailable:  channels.Transient,
	http.StatusGatewayTimeout:      channels.Transient,

	// Permanent: this request will never be accepted.
	http.StatusBadRequest:            channels.Permanent, // validation; errors[] names field and message [S-MSE]
	http.StatusNotAcceptable:         channels.Permanent, // missing Accept header [S-RESP]
	http.StatusRequestEntityTooLarge: channels.Permanent, // payload too large [3P-SG]

	// Halt: the credentials or the account. [S-ERR] [S-RESP]
	http.StatusUnauthorized: channels.Halt, // missing, invalid or revoked key; also "Maximum credits exceeded"
	http.StatusForbidden:    channels.Halt, // key scopes; but "temporarily blocked ... due to repeated bad
	// requests" is a Throttle (see blocked), and "From address doesn't match Verified Sender
	// Identity" Permanent for its message (see senderIdentity).

	// Halt: "Unavailable due to data residency restrictions" [S-ERR]. The
	// account of the key keeps its data in a region (an EU regional
	// subuser) that this host does not serve, so every mail of the key
	// fails the same way until it is sent to the regional host
	// (EUBaseURL); dead-lettering message by message would lose them all.
	http.StatusUnavailableForLegalReasons: channels.Halt,
}

// blockedMarkers are lowercase phrases of the 403 that means "temporarily
// blocked due to repeated bad requests": the current wording [S-RESP] and
// the older "Too many bad requests. Temporary block".
var blockedMarkers = []string{"temporarily blocked", "temporary block"}

// blocked reports whether any message of a 403 body is the temporary block.
func blocked(messages []string) bool { return anyMarker(messages, blockedMarkers) }

// senderIdentityMarkers are lowercase phrases of the 403 that means the
// mail's from address is not a verified Sender Identity [S-RESP]: a fault
// of that message's sender, not of the API key.
var senderIdentityMarkers = []string{"verified sender identity"}

// senderIdentity reports whether any message of a 403 body says the from
// address is not a verified Sender Identity.
func senderIdentity(messages []string) bool { return anyMarker(messages, senderIdentityMarkers) }

// anyMarker reports whether any of messages, lowercased, contains any of
// markers (lowercase phrases).
func anyMarker(messages, markers []string) bool {
	for _, m := range messages {
		m = strings.ToLower(m)
		for _, k := range markers {
			if strings.Contains(m, k) {
				return true
			}
		}
	}
	return false
}

// CodeSenderIdentity is the Code of a 403 "from address does not match a
// verified Sender Identity": Permanent for the message, until
// [SenderIdentityHalt] of the key's answers in a row say it (see Send).
const CodeSenderIdentity = "sender-identity"

// SenderIdentityHalt is how many sender-identity 403s in a row, with no
// other answer for the API key between them, make the next one a Halt of
// the key: then most of its mail comes from an address the account has not
// verified (a configuration fault), and dead-lettering each message would
// lose them all.
const SenderIdentityHalt = 10

// classify returns the class of a non-2xx status whose error body carried
// messages. A status not in [statuses] is Transient from 500 up, Permanent
// from 400 to 499, and Transient otherwise (an unexpected 1xx or 3xx).
func classify(status int, messages []string) channels.Class {
	if status == http.StatusForbidden && blocked(messages) {
		return channels.Throttle
	}
	if c, ok := statuses[status]; ok {
		return c
	}
	if status >= 400 && status < 500 {
		return channels.Permanent
	}
	return channels.Transient
}
