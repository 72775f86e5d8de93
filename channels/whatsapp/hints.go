package whatsapp

import "time"

// SpamCooldown is the smallest RetryAfter of error 131048, "Spam rate
// limit hit": Meta restricts how many messages the phone number may send
// because too many of its earlier ones were blocked or reported as spam.
// That is a quality restriction of the number, not a rate we exceeded a
// moment ago: Meta names no duration and asks the sender to check the
// number's quality in WhatsApp Manager, so retrying after the usual
// cooldown of a second would only add more refused sends. An hour keeps the
// key quiet long enough for an operator to look (the pacer logs the
// throttle), and the pacer's PACER_MAX_COOLDOWN (default 1 h) still caps it.
// A longer Retry-After from the API wins.
//
// Sources: https://developers.facebook.com/documentation/business-messaging/whatsapp/support/error-codes
// (131048) and https://developers.facebook.com/documentation/business-messaging/whatsapp/messaging-limits
// (quality rating); providers.md §6.2 recommends a cooldown of hours.
const SpamCooldown = time.Hour

// cooldowns gives the smallest RetryAfter of error codes whose throttle
// lasts longer than the pacer's default cooldown.
var cooldowns = map[int]time.Duration{
	131048: SpamCooldown,
}
