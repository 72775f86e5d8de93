package whatsapp

import (
	"time"

	"github.com/pacerhq/pacer/channels"
)

// rule is what one Cloud API error.code means for the pacer.
type rule struct {
	class channels.Class
	scope channels.Scope // meaningful for Throttle; ScopeKey otherwise
}

var (
	throttleKey     = rule{channels.Throttle, channels.ScopeKey}
	throttlePair    = rule{channels.Throttle, channels.ScopePair}
	throttleAccount = rule{channels.Throttle, channels.ScopeAccount}
	transient       = rule{channels.Transient, channels.ScopeKey}
	permanent       = rule{channels.Permanent, channels.ScopeKey}
	halt            = rule{channels.Halt, channels.ScopeKey}
)

// codes maps a Cloud API error.code to its class and, for throttles, its
// scope. Codes 200 to 299 (API permission) are Halt too; see [classify]. A
// code not listed is classified by HTTP status.
//
// Sources (read as summarised in the project's providers.md §1.4):
//   - [W-EC] Meta, error codes:
//     https://developers.facebook.com/documentation/business-messaging/whatsapp/support/error-codes
//   - [W-EC-HTTP] a public mirror of Meta's older error table with its HTTP
//     status column (statuses quoted below; do not key on them).
//   - [W-TP] throughput (130429, 131057):
//     https://developers.facebook.com/documentation/business-messaging/whatsapp/throughput
//   - [W-AP] rate limits and pair rate limits (131056, 80007, 4):
//     https://developers.facebook.com/documentation/business-messaging/whatsapp/about-the-platform
//   - [W-RL] Graph API rate limiting (613):
//     https://developers.facebook.com/docs/graph-api/overview/rate-limiting
//   - [3P-W] 131049 and third-party HTTP 429 reports:
//     https://dualhook.com/docs/whatsapp-error-131056,
//     https://docs.ycloud.com/reference-link/whatsapp-errors
var codes = map[int]rule{
	// Throttles. Third parties report HTTP 429 for 130429, 131056 and 4
	// where Meta's table says 400.
	130429: throttleKey,     // Cloud API throughput reached, per phone number [W-TP] [W-EC]
	131056: throttlePair,    // pair rate limit, business number -> one user; retry after 4^X s [W-AP]
	80007:  throttleAccount, // WABA rate limit, rolling hour [W-AP] [W-EC]
	4:      throttleAccount, // app reached its API call rate limit [W-EC]
	131048: throttleKey,     // spam rate limit: a quality restriction of the number; cooldown SpamCooldown [W-EC]
	613:    throttleKey,     // "Calls to this api have exceeded the rate limit" (Graph API, often HTTP 400) [W-RL]

	// Permanent for this send; the pacer keeps any per-user cooldown.
	131049: permanent, // not delivered "to maintain healthy ecosystem engagement" [3P-W]

	// Transient: nothing to do with our rate. 1 and 131000 should be retried a bounded number of times.
	131057: transient, // 500 account in maintenance mode (throughput upgrade, up to 1 min) [W-TP] [W-EC-HTTP]
	2:      transient, // 503 API service: temporary downtime or overload [W-EC-HTTP]
	131000: transient, // 500 something went wrong [W-EC-HTTP]
	131016: transient, // 500 service unavailable [W-EC-HTTP]
	1:      transient, // 400 API unknown: invalid request or possible server error [W-EC-HTTP]

	// Permanent: the recipient or the request is wrong. [W-EC-HTTP]
	131026: permanent, // 400 message undeliverable
	131047: permanent, // 400 re-engagement: more than 24 h since the user replied
	131021: permanent, // 400 recipient cannot be sender
	131051: permanent, // 400 unsupported message type
	131053: permanent, // 400 media upload error
	100:    permanent, // 400 invalid parameter
	131008: permanent, // 400 required parameter is missing
	131009: permanent, // 400 parameter value is not valid
	33:     permanent, // 400 parameter value is not valid (number deleted)
	130472: permanent, // 400 user's number is part of an experiment
	132000: permanent, // 400 template parameter count mismatch
	132001: permanent, // 404 template does not exist
	132005: permanent, // 400 template hydrated text too long
	132007: permanent, // 400 template format character policy violated
	132012: permanent, // 400 template parameter format mismatch
	132015: permanent, // 400 template is paused

	// Halt: credentials, permissions or the account. [W-EC-HTTP]
	0:      halt, // 401 AuthException
	190:    halt, // 401 access token expired
	3:      halt, // 500 capability or permissions issue
	10:     halt, // 403 permission denied
	131005: halt, // 403 access denied
	368:    halt, // 403 temporarily blocked for policy violations
	131031: halt, // 403 account locked
	131042: halt, // 400 business eligibility or payment issue
	131045: halt, // 500 incorrect certificate
	133010: halt, // 400 phone number not registered on the platform: every send from it fails until it is [W-EC]
}

// classify returns the rule for a Cloud API error.code, and false if the
// code is not in [codes] or the 200-299 range.
func classify(code int) (rule, bool) {
	if r, ok := codes[code]; ok {
		return r, true
	}
	if code >= 200 && code <= 299 { // 403 API permission [W-EC-HTTP]
		return halt, true
	}
	return rule{}, false
}

// ThrottleOf returns what a Cloud API error.code means when it is a
// throttle, wherever it arrives: in the answer to a send, or in a status
// webhook's errors[] (130429 does: Meta's webhook example carries it,
// providers.md §1.2). scope is the unit it limits (the number, the pair
// number -> recipient, the account or app: [codes]), least the smallest
// cooldown the pacer keeps for it ([AccountCooldown] for an account
// scope, [SpamCooldown] for 131048, else 0: the pacer's own). ok is false
// for a code that is not a throttle.
func ThrottleOf(code int) (scope channels.Scope, least time.Duration, ok bool) {
	r, found := classify(code)
	if !found || r.class != channels.Throttle {
		return 0, 0, false
	}
	if r.scope == channels.ScopeAccount {
		least = AccountCooldown
	}
	return r.scope, max(least, cooldowns[code]), true
}
