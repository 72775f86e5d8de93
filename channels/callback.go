package channels

// The biz_opaque_callback_data Pacer sets on a WhatsApp message: its
// envelope id and campaign, which Meta echoes in every status webhook of
// the message. The WhatsApp adapter writes it ([CallbackData]); the
// webhook receiver (pacer/webhook) and the fake Cloud API read it
// ([ParseCallbackData]). It lives in the contract, beside [Message], so
// that the side that reads webhooks needs no adapter.

import (
	"strconv"
	"strings"
	"unicode/utf8"
)

// prefix opens a biz_opaque_callback_data that carries a campaign
// beside the envelope id (see [CallbackData]).
const callbackPrefix = "pacer1:"

// MaxCallbackLen is the longest biz_opaque_callback_data the Cloud API takes, in
// characters.
//
// Source: https://developers.facebook.com/docs/whatsapp/cloud-api/reference/messages
// (biz_opaque_callback_data: "Maximum 512 characters").
const MaxCallbackLen = 512

// CallbackData returns the biz_opaque_callback_data the WhatsApp adapter sets for the
// envelope id and campaign, which Meta echoes in every status webhook of
// the message ([ParseCallbackData] reads it back):
//
//   - no campaign: the id itself, as Pacer always sent it;
//   - a campaign: "pacer1:<n>:<campaign>:<id>", n the campaign's length in
//     bytes (decimal), so a campaign or an id holding ":" reads back whole.
//
// An id that itself starts with "pacer1:" is written in the second form
// (with n 0), so every value CallbackData writes reads back as what it was given.
// When the second form would exceed [MaxCallbackLen] characters (a
// campaign of more than about 370 characters), the campaign is left out:
// the message's statuses still name its id, and count in no campaign.
func CallbackData(id, campaign string) string {
	if campaign == "" && !strings.HasPrefix(id, callbackPrefix) {
		return id
	}
	s := callbackPrefix + strconv.Itoa(len(campaign)) + ":" + campaign + ":" + id
	if utf8.RuneCountInString(s) > MaxCallbackLen {
		return CallbackData(id, "")
	}
	return s
}

// ParseCallbackData returns the envelope id and campaign of a
// biz_opaque_callback_data written by [CallbackData]. A value not of the
// "pacer1:" form (a message sent before campaigns were carried, or one
// whose payload set the field itself) is the id, with no campaign.
func ParseCallbackData(s string) (id, campaign string) {
	rest, ok := strings.CutPrefix(s, callbackPrefix)
	if !ok {
		return s, ""
	}
	digits, rest, ok := strings.Cut(rest, ":")
	n, err := strconv.Atoi(digits)
	if !ok || err != nil || n < 0 || n >= len(rest) || rest[n] != ':' || strconv.Itoa(n) != digits {
		return s, ""
	}
	return rest[n+1:], rest[:n]
}
