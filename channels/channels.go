// Package channels is the contract between the pacer and the provider
// adapters (channels/whatsapp and friends): what a message is, what a send
// returns, and how a provider's refusal is described.
//
// An adapter turns every provider response into exactly one [Class]. The
// pacer decides what to do with it: a throttle slows the pacing key down and
// retries later, a transient failure is retried with back-off, a permanent one
// goes to the DLQ, a halt stops the key without dropping anything.
//
// This package imports only the standard library.
package channels

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"time"
)

// Message is one send request, built by the pacer from an envelope.
type Message struct {
	ID      string          // idempotency key of the envelope
	Key     string          // pacing key: for WhatsApp the business phone-number ID
	To      string          // recipient address; never logged
	Payload json.RawMessage // JSON object merged into the provider request body; may be nil
	// Campaign is the envelope's campaign ("" if none). The adapters whose
	// provider echoes per-message data in its status webhooks send it
	// (WhatsApp in biz_opaque_callback_data, SendGrid as
	// custom_args.pacer_campaign), so those events count per campaign.
	Campaign string
}

// Result is what a successful send returns.
type Result struct {
	ProviderID string // the provider's id for the accepted message, e.g. a WhatsApp wamid
}

// Sender delivers one message to a provider. Send returns a nil error only
// when the provider accepted the message; otherwise the error is a *[Error]
// (read it with errors.As), or ctx.Err() when ctx ended before a response.
// Implementations are safe for concurrent use.
type Sender interface {
	Send(ctx context.Context, m Message) (Result, error)
}

// Class says what a provider response means for the pacer.
type Class int

const (
	// Success: the provider accepted the message.
	Success Class = iota
	// Throttle: the provider asked us to slow down; retry later, not an attempt failure.
	Throttle
	// Transient: the send failed for a reason unrelated to our rate; retry with back-off.
	Transient
	// Permanent: this message will never succeed; dead-letter it.
	Permanent
	// Halt: an account or credential problem; stop the pacing key and alert.
	Halt
)

var classNames = [...]string{"success", "throttle", "transient", "permanent", "halt"}

// String returns the class name used in metric labels and DLQ reasons.
func (c Class) String() string {
	if c < 0 || int(c) >= len(classNames) {
		return fmt.Sprintf("class(%d)", int(c))
	}
	return classNames[c]
}

// Scope says which unit a throttle applies to.
type Scope int

const (
	// ScopeKey: the whole pacing key (a WhatsApp phone number, an FCM project).
	ScopeKey Scope = iota
	// ScopePair: only this pacing key and this recipient (WhatsApp 131056).
	ScopePair
	// ScopeAccount: everything behind the same credentials (WhatsApp 80007 and 4).
	ScopeAccount
)

var scopeNames = [...]string{"key", "pair", "account"}

// String returns "key", "pair" or "account".
func (s Scope) String() string {
	if s < 0 || int(s) >= len(scopeNames) {
		return fmt.Sprintf("scope(%d)", int(s))
	}
	return scopeNames[s]
}

// Error is what every Sender returns when a provider refused or failed a send.
// Read it with errors.As; [ClassOf] and [RetryAfter] are shortcuts.
//
// Error text never contains credentials or the recipient address.
type Error struct {
	Channel    string        // the adapter's channel name, e.g. "whatsapp"
	Status     int           // HTTP status; 0 if no response arrived
	Code       string        // the provider's error code, verbatim; "" if none
	Class      Class         // what the response means; never Success
	Scope      Scope         // what a Throttle applies to; ScopeKey otherwise
	RetryAfter time.Duration // delay the provider asked for; 0 if none
	Detail     string        // short provider message, safe to log; may be ""
	// Trace is the provider's id of the request, what its support asks
	// for (WhatsApp's fbtrace_id, APNs's apns-id); "" if none.
	Trace string
	Err   error // transport or decode cause; may be nil
	// Gone: the provider says the recipient is dead for this sender and
	// documents that it will stay so (a device token unregistered from the
	// app or project): Class is Permanent, and the caller stops sending to
	// the recipient (suppresses it) as well as dropping the message.
	Gone bool
	// GoneSince is when the provider saw the recipient gone, if it said
	// (APNs's 410 timestamp); zero otherwise.
	GoneSince time.Time
}

// Error returns "<channel>: <class> status=<n> code=<c> trace=<t>:
// <detail>: <err>", each part after the status only when set. It is what
// the logs and a DLQ record's pacer-detail carry.
func (e *Error) Error() string {
	s := fmt.Sprintf("%s: %s status=%d", e.Channel, e.Class, e.Status)
	if e.Code != "" {
		s += " code=" + e.Code
	}
	if e.Trace != "" {
		s += " trace=" + e.Trace
	}
	if e.Detail != "" {
		s += ": " + e.Detail
	}
	if e.Err != nil {
		s += ": " + e.Err.Error()
	}
	return s
}

// Unwrap returns the transport or decode cause, if any.
func (e *Error) Unwrap() error { return e.Err }

// ClassOf returns the class of err: Success for nil, the Class of a wrapped
// *Error, and Transient for any other error (a network failure, a timeout).
func ClassOf(err error) Class {
	if err == nil {
		return Success
	}
	var e *Error
	if errors.As(err, &e) {
		return e.Class
	}
	return Transient
}

// RetryAfter returns the delay a wrapped *Error asked for, or 0.
func RetryAfter(err error) time.Duration {
	var e *Error
	if errors.As(err, &e) {
		return e.RetryAfter
	}
	return 0
}

// CodeNoCredentials is the Code of the Permanent error a Sender returns,
// without a request, for a pacing key it holds no credential for (a
// WhatsApp phone number without its access token, say). The pacer
// dead-letters such a message with the reason "no-credentials", which can
// be replayed once the credential exists; other keys are not affected.
const CodeNoCredentials = "no-credentials"

// Limit is a provider's documented sending rate for one pacing key: PerSecond
// in messages per second, Burst in messages. Source names the page the
// numbers come from and when it was read; re-read it when the account's tier
// changes, since providers never report their limits at run time.
type Limit struct {
	PerSecond float64
	Burst     int
	Source    string
}

// MaybeAccepted reports whether the provider may have accepted a message
// whose Send returned err, i.e. whether sending it again could deliver it
// twice. It is false only when the outcome is known to be "not accepted":
// the provider answered with a non-2xx status, the adapter refused the
// message before sending (Status 0 with class Permanent or Halt), or the
// connection could not even be opened (a dial or DNS error). A timeout, a
// connection cut after the request was written, a cancelled context or a 2xx
// answer the adapter could not read all leave the outcome unknown: true.
func MaybeAccepted(err error) bool {
	if err == nil {
		return true
	}
	var e *Error
	if errors.As(err, &e) {
		switch {
		case e.Status >= 200 && e.Status < 300:
			return true
		case e.Status > 0:
			return false
		case e.Class == Permanent || e.Class == Halt:
			return false
		}
	}
	var op *net.OpError
	if errors.As(err, &op) && op.Op == "dial" {
		return false
	}
	var dns *net.DNSError
	return !errors.As(err, &dns)
}
