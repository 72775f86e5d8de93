package apns

import (
	"net/http"
	"time"

	"github.com/pacerhq/pacer/channels"
)

// ServerRetry is the wait Apple asks for before a notification answered
// with a 5xx status is sent again: "After 15 minutes, you can retry JSON
// payloads that receive response status codes that begin with 5XX. While
// retrying, you may employ a back-off technique." That covers every 5xx:
// the two Apple lists are 500 (InternalServerError) and 503
// (ServiceUnavailable, Shutdown); 429 and the 4xx reasons are not
// concerned. The adapter itself sets no RetryAfter for them; `pacer run`
// waits PACER_APNS_SERVER_RETRY (default [DefaultServerRetry]).
//
// Source: https://developer.apple.com/documentation/usernotifications/handling-notification-responses-from-apns
// (providers.md §8.3).
const ServerRetry = 15 * time.Minute

// DefaultServerRetry is `pacer run`'s default wait before a notification
// answered with a 5xx is retried: 5 minutes, the longest default retry
// tier, not Apple's [ServerRetry]. A retry copy waiting holds back its
// partition's offset commit, and the idempotency ledger must remember
// every delivered record behind it that long (PACER_LEDGER_TTL, 7m by
// default, at least 1.2 x the longest retry delay + 1m): Apple's 15
// minutes needs PACER_LEDGER_TTL=19m, about 2.7 times the ledger's Redis
// memory, which `pacer run` refuses to start without.
const DefaultServerRetry = 5 * time.Minute

// rule is what one APNs reason means for the pacer.
type rule struct {
	class   channels.Class
	scope   channels.Scope // meaningful for Throttle; ScopeKey otherwise
	meaning string         // short description, used as channels.Error.Detail
}

// reasons maps the reason of an APNs error body ({"reason":"..."}) to its
// class. The status APNs documents for each reason is in the comment; the
// class comes from the reason alone. A reason not listed is classified by
// HTTP status, see [statusClass].
//
// Sources (read as summarised in the project's providers.md §2.3):
//   - [A-RS] Apple, handling notification responses from APNs:
//     https://developer.apple.com/documentation/usernotifications/handling-notification-responses-from-apns
//     (also https://developer.apple.com/documentation/usernotifications/handling-error-responses-from-apns)
//   - [A-SR] Apple, sending notification requests to APNs (headers, 4 KB limit):
//     https://developer.apple.com/documentation/usernotifications/sending-notification-requests-to-apns
//   - [A-TK] Apple, establishing a token-based connection (the 20 and 60 minute rules):
//     https://developer.apple.com/documentation/usernotifications/establishing-a-token-based-connection-to-apns
//   - 410 can lag days behind an uninstall:
//     https://developer.apple.com/forums/thread/745902
//
// gone are the reasons whose token APNs documents as dead for the topic
// ("stop sending notifications to that token", 410) [A-RS]: the answer
// sets channels.Error.Gone. BadDeviceToken and DeviceTokenNotForTopic
// (400) may be an environment or topic mismatch of ours, not a dead
// token, so they only fail the message.
var gone = map[string]bool{"Unregistered": true, "ExpiredToken": true}

var reasons = map[string]rule{
	// Throttle: only this device token; "you can retry with a delay". [A-RS]
	"TooManyRequests": {channels.Throttle, channels.ScopePair, "too many requests to the same device token"}, // 429

	// Halt: our JWT is rotated more than once per 20 min, a token-caching
	// bug, not a rate signal. [A-RS] [A-TK]
	"TooManyProviderTokenUpdates": {channels.Halt, channels.ScopeKey, "provider token rotated more than once in 20 minutes"}, // 429

	// Transient: the server, not our rate. "Shutdown" means reconnect, which
	// the HTTP/2 transport does. [A-RS]
	"ServiceUnavailable":  {channels.Transient, channels.ScopeKey, "service unavailable"},     // 503
	"Shutdown":            {channels.Transient, channels.ScopeKey, "server shutting down"},    // 503
	"InternalServerError": {channels.Transient, channels.ScopeKey, "internal server error"},   // 500
	"IdleTimeout":         {channels.Transient, channels.ScopeKey, "connection idle timeout"}, // 400; connection-level (our reading)

	// Permanent: the device token is dead or wrong; "don't retry". [A-RS]
	"Unregistered":           {channels.Permanent, channels.ScopeKey, "device token no longer active for the topic"}, // 410, with timestamp
	"ExpiredToken":           {channels.Permanent, channels.ScopeKey, "device token expired"},                        // 410
	"BadDeviceToken":         {channels.Permanent, channels.ScopeKey, "bad device token"},                            // 400
	"DeviceTokenNotForTopic": {channels.Permanent, channels.ScopeKey, "device token not for the topic"},              // 400

	// Permanent: the request is wrong; retry only after a fix. [A-RS]
	"BadCollapseId":      {channels.Permanent, channels.ScopeKey, "apns-collapse-id too long"},            // 400
	"BadExpirationDate":  {channels.Permanent, channels.ScopeKey, "bad apns-expiration"},                  // 400
	"BadMessageId":       {channels.Permanent, channels.ScopeKey, "bad apns-id"},                          // 400
	"BadPriority":        {channels.Permanent, channels.ScopeKey, "bad apns-priority"},                    // 400
	"BadTopic":           {channels.Permanent, channels.ScopeKey, "bad apns-topic"},                       // 400
	"DuplicateHeaders":   {channels.Permanent, channels.ScopeKey, "duplicate headers"},                    // 400
	"InvalidPushType":    {channels.Permanent, channels.ScopeKey, "bad apns-push-type"},                   // 400
	"MissingDeviceToken": {channels.Permanent, channels.ScopeKey, "no device token in the path"},          // 400
	"MissingTopic":       {channels.Permanent, channels.ScopeKey, "no apns-topic"},                        // 400
	"PayloadEmpty":       {channels.Permanent, channels.ScopeKey, "empty payload"},                        // 400
	"TopicDisallowed":    {channels.Permanent, channels.ScopeKey, "pushing to this topic is not allowed"}, // 400
	"BadPath":            {channels.Permanent, channels.ScopeKey, "bad request path"},                     // 404
	"MethodNotAllowed":   {channels.Permanent, channels.ScopeKey, "method not allowed"},                   // 405
	"PayloadTooLarge":    {channels.Permanent, channels.ScopeKey, "payload too large"},                    // 413

	// Halt: the provider token or certificate. An ExpiredProviderToken is
	// renewed and the send retried once before it gets here; see Send. [A-RS] [A-TK]
	"ExpiredProviderToken":       {channels.Halt, channels.ScopeKey, "provider token expired"},                // 403
	"InvalidProviderToken":       {channels.Halt, channels.ScopeKey, "provider token invalid"},                // 403
	"MissingProviderToken":       {channels.Halt, channels.ScopeKey, "no provider token"},                     // 403
	"UnrelatedKeyIdInToken":      {channels.Halt, channels.ScopeKey, "key ID not related to the topic"},       // 403; needs a new connection
	"BadEnvironmentKeyIdInToken": {channels.Halt, channels.ScopeKey, "key ID not for this environment"},       // 403
	"BadCertificate":             {channels.Halt, channels.ScopeKey, "bad certificate"},                       // 403
	"BadCertificateEnvironment":  {channels.Halt, channels.ScopeKey, "certificate for the other environment"}, // 403
	"Forbidden":                  {channels.Halt, channels.ScopeKey, "forbidden; do not retry"},               // 403
}

// statusClass classifies a response whose reason is unknown or missing by
// its HTTP status: 429 is a Throttle (of the device token: the only 429
// Apple documents for sends is TooManyRequests, "too many requests were
// made consecutively to the same device token" [A-RS]), 5xx and anything
// that is neither 2xx nor 4xx are Transient, 403 is Halt, other 4xx are
// Permanent. 403 deviates from "4xx
// is permanent" on purpose: every 403 APNs documents is a credential
// problem, and dead-lettering every message of the key would lose them.
func statusClass(status int) channels.Class {
	switch {
	case status == http.StatusTooManyRequests:
		return channels.Throttle
	case status >= 500 || status < 400:
		return channels.Transient
	case status == http.StatusForbidden:
		return channels.Halt
	default:
		return channels.Permanent
	}
}
