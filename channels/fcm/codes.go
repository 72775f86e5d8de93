package fcm

import (
	"encoding/json"
	"net/http"
	"strings"
	"time"

	"github.com/pacerhq/pacer/channels"
)

// QuotaCooldown is the smallest RetryAfter of a project-wide throttle: FCM
// asks senders that exceed the project (or topic) message rate to back off
// "with a minimum initial delay of 1 minute", and the quota refills "in the
// following minute". A longer Retry-After header wins; a shorter one is
// raised to it. Device-scope throttles have no such minimum.
//
// Sources: https://firebase.google.com/docs/reference/fcm/rest/v1/ErrorCode
// (QUOTA_EXCEEDED) and https://firebase.google.com/docs/cloud-messaging/throttling-and-quotas.
const QuotaCooldown = time.Minute

// ServerRetry is the wait FCM asks for before a 5xx answer is retried:
// "at least 10 seconds" for a 500 or 503 (with exponential back-off beyond
// it), where the pacer's first retry tier would come back after 5 s. It is
// the default of PACER_FCM_SERVER_RETRY, which the pacer applies when it
// retries (a longer Retry-After wins); the adapter reports Retry-After as
// FCM sent it.
//
// Source: https://firebase.google.com/docs/cloud-messaging/scale-fcm
// (retry errors with back-off; providers.md §8.4).
const ServerRetry = 10 * time.Second

// codes maps an FCM error code to its class: the errorCode of the
// google.firebase.fcm.v1.FcmError detail when there is one, else the
// canonical error.status of the Google API error envelope. A code not listed
// is classified by HTTP status in [statusClass].
//
// Sources (read as summarised in the project's providers.md §3.3 and §7):
//   - [F-EC] FCM error codes and what to do about each:
//     https://firebase.google.com/docs/reference/fcm/rest/v1/ErrorCode
//   - [F-TQ] 429 RESOURCE_EXHAUSTED ("QUOTA_EXCEEDED") for the per-project
//     quota, and in overload situations:
//     https://firebase.google.com/docs/cloud-messaging/throttling-and-quotas
//   - [I-FB719] a real 429 with status RESOURCE_EXHAUSTED, a
//     google.rpc.ErrorInfo RATE_LIMIT_EXCEEDED and no FcmError:
//     https://github.com/firebase/firebase-admin-go/issues/719
//   - [I-FB736] QuotaFailure names which quota (project, device, topic):
//     https://github.com/firebase/firebase-admin-go/issues/736
//   - [L-FB] firebase-admin-go v4.21.0 messaging/messaging_errors.go, which
//     still accepts APNS_AUTH_ERROR, the old name of THIRD_PARTY_AUTH_ERROR.
var codes = map[string]channels.Class{
	// Throttle: the project quota (600k/min), or a device or topic rate;
	// see [throttleScope] and [QuotaWindow] for the scope and
	// [QuotaCooldown] for the delay.
	"QUOTA_EXCEEDED":     channels.Throttle, // 429, FcmError [F-EC]
	"RESOURCE_EXHAUSTED": channels.Throttle, // 429 without FcmError [F-TQ] [I-FB719]

	// Transient: nothing to do with our rate. FCM may have delivered a
	// message it answered 503 for (firebase-admin-node#1248): a retry can
	// duplicate.
	"UNAVAILABLE":       channels.Transient, // 503 overload; honour Retry-After [F-EC]
	"INTERNAL":          channels.Transient, // 500 [F-EC]
	"UNSPECIFIED_ERROR": channels.Transient, // "no more information is available" [F-EC]; retry, bounded

	// Permanent: this message to this token will never succeed.
	"UNREGISTERED":       channels.Permanent, // 404 the token is dead: delete it [F-EC]
	"SENDER_ID_MISMATCH": channels.Permanent, // 403 the token belongs to another sender [F-EC]
	"INVALID_ARGUMENT":   channels.Permanent, // 400 bad field, bad token, payload too big [F-EC]

	// Permanent for this message only: the project's APNs key or
	// certificate, or its web push key, is invalid, so sends to iOS and web
	// targets fail while Android sends go through [F-EC]. A registration
	// token does not say its platform, so the adapter cannot hold iOS
	// sends apart from Android ones: each failing message is dead-lettered
	// (permanent:THIRD_PARTY_AUTH_ERROR, replayable once the key is fixed
	// in the Firebase console) and the project key keeps flowing.
	"THIRD_PARTY_AUTH_ERROR": channels.Permanent, // 401 [F-EC]
	"APNS_AUTH_ERROR":        channels.Permanent, // old name of THIRD_PARTY_AUTH_ERROR [L-FB]

	// Halt: credentials or permissions; every message of the project fails.
	"UNAUTHENTICATED":   channels.Halt, // 401 OAuth token rejected; Send refreshes it once first
	"PERMISSION_DENIED": channels.Halt, // 403 IAM: no cloudmessaging.messages.create on the project
}

// statusClass classifies a response whose code is not in [codes] (or that
// has no Google error body) by HTTP status alone: 429 is a Throttle, as
// FCM also answers it in overload [F-TQ]; 5xx is Transient; 401 and 403
// are Halt, since the credentials or the project are wrong for every
// message; anything else is Permanent.
func statusClass(status int) channels.Class {
	switch {
	case status == http.StatusTooManyRequests:
		return channels.Throttle
	case status >= 500:
		return channels.Transient
	case status == http.StatusUnauthorized || status == http.StatusForbidden:
		return channels.Halt
	default:
		return channels.Permanent
	}
}

// Detail @types of the Google API error envelope.
const (
	typeFcmError  = "type.googleapis.com/google.firebase.fcm.v1.FcmError"
	typeApnsError = "type.googleapis.com/google.firebase.fcm.v1.ApnsError"
	typeErrorInfo = "type.googleapis.com/google.rpc.ErrorInfo"
)

// apiError is the Google API error envelope [F-EC]:
//
//	{"error":{"code":404,"message":"Requested entity was not found.","status":"NOT_FOUND",
//	  "details":[{"@type":"type.googleapis.com/google.firebase.fcm.v1.FcmError","errorCode":"UNREGISTERED"}]}}
type apiError struct {
	Error *struct {
		Code    int               `json:"code"`
		Message string            `json:"message"`
		Status  string            `json:"status"`
		Details []json.RawMessage `json:"details"`
	} `json:"error"`
}

// detail is the union of the detail types we read.
type detail struct {
	Type       string            `json:"@type"`
	ErrorCode  string            `json:"errorCode"`  // FcmError
	StatusCode int               `json:"statusCode"` // ApnsError: the APNs HTTP status
	Reason     string            `json:"reason"`     // ApnsError, ErrorInfo
	Metadata   map[string]string `json:"metadata"`   // ErrorInfo
}

// decodeDetails decodes the details of e that are JSON objects, skipping
// the rest: one odd detail must not hide the FcmError.
func decodeDetails(raw []json.RawMessage) []detail {
	ds := make([]detail, 0, len(raw))
	for _, r := range raw {
		var d detail
		if json.Unmarshal(r, &d) == nil {
			ds = append(ds, d)
		}
	}
	return ds
}

// errorCode returns the errorCode of the first FcmError detail, else status.
func errorCode(ds []detail, status string) string {
	for _, d := range ds {
		if d.Type == typeFcmError && d.ErrorCode != "" {
			return d.ErrorCode
		}
	}
	return status
}

// throttleScope returns the scope of a throttle when its details say it
// in a shape Google documents or was seen to send, with known true:
// ScopeKey (the project) for a google.rpc.ErrorInfo whose quota_unit has
// the dimension {project} or whose quota_limit is SendsPerMinutePerProject
// (the 429 recorded in [I-FB719]); ScopePair (this project and this
// device) for an ApnsError relaying APNs' 429, which Apple answers for
// too many requests to one device token [F-APNSERR]. Otherwise known is
// false and [Client.Send] decides a QUOTA_EXCEEDED by the tokens refused
// ([QuotaWindow]), any other throttle is the project's:
// FCM documents no field that tells a device's QUOTA_EXCEEDED from the
// project's (the QuotaFailure detail "specifies which quota was exceeded",
// but its subjects are not documented), so no subject is read. A project
// ID or description that contains "device" decides nothing.
//
// Sources: https://firebase.google.com/docs/reference/fcm/rest/v1/ErrorCode
// (QUOTA_EXCEEDED), https://firebase.google.com/docs/reference/fcm/rest/v1/ApnsError,
// https://github.com/firebase/firebase-admin-go/issues/719 (providers.md
// §3.2, §8.4).
func throttleScope(ds []detail) (scope channels.Scope, known bool) {
	for _, d := range ds {
		switch d.Type {
		case typeErrorInfo:
			if unitDimension(d.Metadata["quota_unit"]) == "project" || d.Metadata["quota_limit"] == "SendsPerMinutePerProject" {
				return channels.ScopeKey, true
			}
		case typeApnsError:
			if d.StatusCode == http.StatusTooManyRequests {
				return channels.ScopePair, true
			}
		}
	}
	return channels.ScopeKey, false
}

// unitDimension returns the dimension of a quota unit such as
// "1/min/{project}": the name in its last pair of braces, lowercase; ""
// if it has none.
func unitDimension(unit string) string {
	i := strings.LastIndexByte(unit, '{')
	j := strings.LastIndexByte(unit, '}')
	if i < 0 || j < i {
		return ""
	}
	return strings.ToLower(strings.TrimSpace(unit[i+1 : j]))
}
