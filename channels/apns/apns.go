// Package apns sends notifications through the Apple Push Notification
// service (POST /3/device/{device token} over HTTP/2 with a provider token)
// and turns every response into a [channels.Class].
//
// # Message shape
//
//   - Message.Key is the pacing key: the app's bundle ID, sent as apns-topic
//     unless the payload's headers set one.
//
//   - Message.To is the hex device token, the last path segment.
//
//   - Message.Payload is a JSON object: the notification body, plus an
//     optional "headers" member that is taken out and sent as request
//     headers. Nothing else is added to the body; Message.ID is sent nowhere.
//
// For example, the payload
//
//	{"headers": {"apns-push-type": "alert", "apns-priority": "10",
//	             "apns-expiration": "0", "apns-collapse-id": "score"},
//	 "aps": {"alert": {"title": "Goal", "body": "2-1"}},
//	 "match": 42}
//
// goes out as the apns-push-type, apns-priority, apns-expiration and
// apns-collapse-id headers with the body {"aps":{...},"match":42}. The
// headers accepted are the ones Apple documents: apns-push-type,
// apns-priority (10, 5 or 1), apns-expiration (epoch seconds, 0 = once),
// apns-collapse-id (at most 64 bytes), apns-topic and apns-id (a lowercase
// UUID; APNs makes one when it is absent, which is the usual case). Values
// are JSON strings, or numbers for apns-priority and apns-expiration. A
// header left out is not sent, and APNs applies its default, except:
//
//   - apns-push-type, which Apple requires on watchOS and recommends
//     everywhere: "background" when aps holds content-available 1 and no
//     alert, sound or badge, "alert" otherwise.
//   - apns-priority of a background push: 5, since Apple calls priority 10
//     (its default) an error for them. A background push with apns-priority
//     10 fails as Permanent "invalid-payload" without a request.
//   - apns-topic gets the suffix its push type needs, unless it ends with
//     it already: .voip, .complication, .pushkit.fileprovider,
//     .push-type.liveactivity, .location-query, .voip-ptt (pushtotalk),
//     .push-type.widgets. [A-SR]
//
// Any other member of "headers", or a bad value, fails the send as
// Permanent "invalid-payload" without a request.
//
// The body must be at most 4096 bytes (5120 for apns-push-type voip) once
// "headers" is removed, or the send fails as Permanent "PayloadTooLarge"
// without a request.
//
// # Provider token
//
// Requests carry an ES256 JWT (header kid, claims iss and iat) signed with
// the team's .p8 key. One token serves the whole Client, and every request
// of the process should go through one Client: it is minted on first use
// and again when Config.TokenTTL old, never sooner than 20 minutes after the
// previous one, since APNs refuses tokens rotated faster with 429
// TooManyProviderTokenUpdates.
//
// # Classification
//
// Responses are classified by the reason of the error body, in the table
// [reasons] beside its Apple sources; see [Client.Send].
//
// Package apnstest is a fake APNs for tests and the demo.
package apns

import (
	"bytes"
	"context"
	"crypto/tls"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/pacerhq/pacer/channels"
)

const (
	channel = "apns"

	// ProductionURL is the APNs production host, the default Config.BaseURL. [A-SR]
	ProductionURL = "https://api.push.apple.com"
	// SandboxURL is the APNs development host, for apps signed for development. [A-SR]
	SandboxURL = "https://api.sandbox.push.apple.com"
	// DefaultTimeout is the timeout of the HTTP client made when Config.HTTPClient is nil.
	DefaultTimeout = 30 * time.Second

	// MaxPayload is the largest notification body APNs accepts, in bytes;
	// MaxVoIPPayload is the limit for apns-push-type voip. [A-SR]
	MaxPayload     = 4096
	MaxVoIPPayload = 5120
	// MaxCollapseID is the longest apns-collapse-id APNs accepts, in bytes. [A-SR]
	MaxCollapseID = 64

	maxBodySize = 64 << 10 // bytes of a response body read
)

// DefaultLimit is the rate the adapter suggests for one pacing key (one
// app's bundle ID): PerSecond in notifications per second, Burst in
// notifications. Apple publishes no numeric APNs rate limit; it throttles
// per device token (429 TooManyRequests, reported as a pair-scoped
// Throttle) and slows senders whose requests fail with 4xx. So these
// numbers are our choice, not Apple's: a burst of 1000 fits in one HTTP/2
// connection, for which APNs was seen to advertise 1000 concurrent streams
// (unconfirmed), and 1000 per second keeps such a connection well inside
// its capacity at usual round trips. Raise it per key when a tenant needs
// more; APNs never reports a limit at run time.
var DefaultLimit = channels.Limit{
	PerSecond: 1000,
	Burst:     1000,
	Source: "our choice: Apple publishes no APNs rate limit (providers.md §2.1; " +
		"https://developer.apple.com/documentation/usernotifications/sending-notification-requests-to-apns and " +
		"https://developer.apple.com/documentation/usernotifications/handling-notification-responses-from-apns, " +
		"read 2026-08; 1000 streams per connection seen in https://github.com/jchambers/pushy/issues/878)",
}

// Config configures a [Client]. KeyID, TeamID and PrivateKey are required;
// the zero value of every other field means its default.
type Config struct {
	// BaseURL is the scheme and host of APNs, optionally with a path prefix;
	// default [ProductionURL]. Use [SandboxURL] for development builds;
	// tests point it at a fake.
	BaseURL string
	// KeyID is the 10-character ID of the signing key (the JWT's kid).
	KeyID string
	// TeamID is the 10-character Apple Developer team ID (the JWT's iss).
	TeamID string
	// PrivateKey is the contents of the .p8 file: a PEM PKCS#8 EC P-256
	// key. It never appears in an error.
	PrivateKey []byte
	// HTTPClient sends the requests; default a client speaking only HTTP/2
	// over TLS 1.2 or later, with a [DefaultTimeout] timeout, a health
	// ping after 1 min without frames, and at most Connections connections
	// per host: a send beyond the streams they allow waits for one instead
	// of opening a connection (see [DefaultConnections]). A custom client
	// must speak HTTP/2, as APNs speaks nothing else, and must bound its
	// own connections: net/http's default pool dials one per send waiting
	// for a stream.
	HTTPClient *http.Client
	// Connections is the bound on HTTP/2 connections per APNs host of the
	// default client, 1 to [MaxConnections]; default [DefaultConnections].
	// Ignored when HTTPClient is set.
	Connections int
	// TLSConfig is the TLS configuration of the default client; default
	// the system roots, TLS 1.2 or later (a lower MinVersion is raised).
	// Tests set RootCAs to trust a fake. Ignored when HTTPClient is set.
	TLSConfig *tls.Config
	// TokenTTL is how long one provider token is used before a new one is
	// minted; default [DefaultTokenTTL]. It must be within [MinTokenTTL]
	// and [MaxTokenTTL].
	TokenTTL time.Duration
	// Now returns the current time, for the token's iat and age and for
	// Retry-After dates; default time.Now. Tests set it.
	Now func() time.Time
}

// Client is a [channels.Sender] for APNs. It is safe for concurrent use;
// use one Client per signing key for the whole process, so that the
// provider token is shared.
type Client struct {
	base  *url.URL
	hc    *http.Client
	now   func() time.Time
	token *tokenSource
}

var _ channels.Sender = (*Client)(nil)

// New returns a Client for cfg. It returns an error naming the field if
// KeyID or TeamID is not 10 letters or digits, PrivateKey is not a PEM
// PKCS#8 EC P-256 key, BaseURL is not an absolute http or https URL, or
// TokenTTL is outside [MinTokenTTL, MaxTokenTTL]. No error ever contains
// key material or a field's value.
func New(cfg Config) (*Client, error) {
	if !isID(cfg.KeyID) {
		return nil, errors.New("apns: Config.KeyID is not 10 letters or digits")
	}
	if !isID(cfg.TeamID) {
		return nil, errors.New("apns: Config.TeamID is not 10 letters or digits")
	}
	key, err := parseKey(cfg.PrivateKey)
	if err != nil {
		return nil, err
	}
	if cfg.BaseURL == "" {
		cfg.BaseURL = ProductionURL
	}
	base, err := url.Parse(cfg.BaseURL)
	// The value and url.Parse's error (which quotes it) are left out: a
	// misplaced secret could sit in it.
	if err != nil || (base.Scheme != "http" && base.Scheme != "https") || base.Host == "" {
		return nil, errors.New("apns: Config.BaseURL is not an absolute http or https URL")
	}
	switch {
	case cfg.TokenTTL == 0:
		cfg.TokenTTL = DefaultTokenTTL
	case cfg.TokenTTL < MinTokenTTL || cfg.TokenTTL > MaxTokenTTL:
		return nil, fmt.Errorf("apns: Config.TokenTTL %v is outside [%v, %v]", cfg.TokenTTL, MinTokenTTL, MaxTokenTTL)
	}
	switch {
	case cfg.Connections == 0:
		cfg.Connections = DefaultConnections
	case cfg.Connections < 1 || cfg.Connections > MaxConnections:
		return nil, fmt.Errorf("apns: Config.Connections %d is outside [1, %d]", cfg.Connections, MaxConnections)
	}
	if cfg.HTTPClient == nil {
		cfg.HTTPClient = defaultHTTPClient(cfg.Connections, cfg.TLSConfig)
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	return &Client{
		base: base,
		hc:   cfg.HTTPClient,
		now:  cfg.Now,
		token: &tokenSource{
			keyID:  cfg.KeyID,
			teamID: cfg.TeamID,
			key:    key,
			ttl:    cfg.TokenTTL,
			now:    cfg.Now,
		},
	}, nil
}

// isID reports whether s looks like an Apple key or team ID: 10 ASCII
// letters or digits. [A-TK]
func isID(s string) bool {
	if len(s) != 10 {
		return false
	}
	for _, c := range []byte(s) {
		if !('0' <= c && c <= '9' || 'A' <= c && c <= 'Z' || 'a' <= c && c <= 'z') {
			return false
		}
	}
	return true
}

// Send posts m to {BaseURL}/3/device/{m.To} with the provider token, the
// apns-topic m.Key (or the payload's) and the payload's headers; the body is
// m.Payload without its "headers" member (see the package doc).
//
// On HTTP 200, Send returns the apns-id response header as
// Result.ProviderID: APNs accepted the notification, which is not yet
// delivered. Otherwise it returns a *[channels.Error] whose Code is the
// APNs reason, or one of ours for a message refused before sending:
//   - an empty m.Key without an apns-topic header: Permanent, Code
//     "invalid-key"; m.To not an even number of hex digits: Permanent, Code
//     "invalid-device-token"; a bad payload: Permanent, Code
//     "invalid-payload"; a body too large: Permanent, Code
//     "PayloadTooLarge". No request is made for any of them.
//   - an error body: classified by reason through [reasons]: 429
//     TooManyRequests is a Throttle of ScopePair (this device token only),
//     410 Unregistered a Permanent whose Detail holds APNs's timestamp (read
//     it with [InvalidSince]); an unknown reason, or none, by status with
//     [statusClass] (429 a Throttle of ScopePair, 5xx Transient, 403 Halt,
//     other 4xx Permanent).
//   - 403 ExpiredProviderToken: if the token is at least 20 minutes old, a
//     new one is minted (once, for all concurrent sends) and the request is
//     repeated once with it; otherwise, or if the repeat fails the same way,
//     Halt. A younger token called expired means our clock is wrong, which
//     a new token would not fix, and rotating it would risk 429
//     TooManyProviderTokenUpdates.
//   - a transport failure: Transient, with Err.
//
// A Retry-After header (APNs documents none) sets RetryAfter. Detail is a
// short description of the reason. Error text never holds the device token
// or the provider token. If ctx ends before a response, Send returns
// ctx.Err() itself.
func (c *Client) Send(ctx context.Context, m channels.Message) (channels.Result, error) {
	if !isDeviceToken(m.To) {
		return channels.Result{}, &channels.Error{Channel: channel, Class: channels.Permanent,
			Code: "invalid-device-token", Detail: "device token is not an even number of hex digits"}
	}
	r, err := parseRequest(m.Payload)
	if err != nil {
		e := &channels.Error{Channel: channel, Class: channels.Permanent, Code: "invalid-payload", Detail: err.Error()}
		if errors.Is(err, errTooLarge) {
			e.Code = "PayloadTooLarge"
		}
		return channels.Result{}, e
	}
	if r.header.Get("apns-topic") == "" {
		if m.Key == "" {
			return channels.Result{}, &channels.Error{Channel: channel, Class: channels.Permanent,
				Code: "invalid-key", Detail: "empty pacing key (bundle ID) and no apns-topic header"}
		}
		r.header.Set("apns-topic", m.Key)
	}
	r.header.Set("apns-topic", topicFor(r.header.Get("apns-topic"), r.header.Get("apns-push-type")))
	u := c.base.JoinPath("3", "device", m.To).String()

	bearer, err := c.token.get()
	if err != nil {
		return channels.Result{}, &channels.Error{Channel: channel, Class: channels.Halt, Err: err}
	}
	resp, raw, err := c.post(ctx, u, bearer, r, m.To)
	if err != nil {
		return channels.Result{}, err
	}
	if resp.StatusCode == http.StatusForbidden && reasonOf(raw) == "ExpiredProviderToken" {
		if fresh, ok := c.token.renew(bearer); ok {
			resp, raw, err = c.post(ctx, u, fresh, r, m.To)
			if err != nil {
				return channels.Result{}, err
			}
		} else {
			e := c.failure(resp, raw)
			e.Detail += "; the token is under 20 minutes old, so not renewed: check the clock"
			return channels.Result{}, e
		}
	}
	if resp.StatusCode == http.StatusOK {
		return channels.Result{ProviderID: resp.Header.Get("apns-id")}, nil
	}
	return channels.Result{}, c.failure(resp, raw)
}

// post makes one request and reads the answer. Its error is ctx.Err() or a
// *channels.Error; resp.Body is closed.
func (c *Client) post(ctx context.Context, u, bearer string, r request, to string) (*http.Response, []byte, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, u, bytes.NewReader(r.body))
	if err != nil { // only a nil ctx gets here: the URL was checked in New and m.To is hex
		return nil, nil, &channels.Error{Channel: channel, Class: channels.Permanent, Err: redact(err, to)}
	}
	for k, v := range r.header {
		req.Header[k] = v
	}
	req.Header.Set("Authorization", bearer)
	req.Header.Set("Content-Type", "application/json")
	resp, err := channels.Do(c.hc, req)
	if err != nil {
		if ctx.Err() != nil {
			return nil, nil, ctx.Err()
		}
		// *url.Error names the URL, which holds the device token.
		return nil, nil, &channels.Error{Channel: channel, Class: channels.Transient, Err: redact(err, to)}
	}
	raw, err := channels.ReadBody(resp.Body, maxBodySize)
	if err != nil {
		if ctx.Err() != nil {
			return nil, nil, ctx.Err()
		}
		return nil, nil, &channels.Error{Channel: channel, Status: resp.StatusCode, Class: channels.Transient,
			Err: redact(fmt.Errorf("apns: read response: %w", err), to)}
	}
	return resp, raw, nil
}

// errorBody is the APNs error body: {"reason":"Unregistered","timestamp":1767323045678}.
type errorBody struct {
	Reason    string `json:"reason"`
	Timestamp *int64 `json:"timestamp"` // ms since the epoch; 410 only
}

// reasonOf returns the reason of an error body, or "" if it has none or it
// does not look like an APNs reason (letters and digits, at most 64).
func reasonOf(raw []byte) string {
	var b errorBody
	if json.Unmarshal(raw, &b) != nil || len(b.Reason) > 64 || !isAlnum(b.Reason) {
		return ""
	}
	return b.Reason
}

// failure builds the *channels.Error for a non-200 response.
func (c *Client) failure(resp *http.Response, raw []byte) *channels.Error {
	e := &channels.Error{
		Channel:    channel,
		Status:     resp.StatusCode,
		RetryAfter: channels.ParseRetryAfter(resp.Header.Get("Retry-After"), c.now()),
		Trace:      apnsID(resp.Header.Get("apns-id")),
	}
	reason := reasonOf(raw)
	if e.Class = statusClass(resp.StatusCode); e.Class == channels.Throttle {
		e.Scope = channels.ScopePair // APNs's only send throttle is per device token
	}
	if reason == "" {
		// The body is left out: it could echo the request.
		e.Err = fmt.Errorf("apns: HTTP %d without an APNs reason", resp.StatusCode)
		return e
	}
	e.Code = reason
	if r, ok := reasons[reason]; ok {
		e.Class, e.Scope, e.Detail = r.class, r.scope, r.meaning
	}
	e.Gone = gone[reason] && resp.StatusCode == http.StatusGone
	var b errorBody
	if json.Unmarshal(raw, &b) == nil && b.Timestamp != nil {
		if e.Gone {
			e.GoneSince = time.UnixMilli(*b.Timestamp).UTC()
		}
		ts := strconv.FormatInt(*b.Timestamp, 10)
		if e.Detail != "" {
			e.Detail += "; "
		}
		e.Detail += "timestamp=" + ts + " (" + time.UnixMilli(*b.Timestamp).UTC().Format(time.RFC3339Nano) + ")"
	}
	return e
}

// InvalidSince returns the time at which APNs last confirmed the device
// token invalid for the topic, from the "timestamp" of a 410 answer
// (milliseconds since the epoch), and true; or false if err is not an APNs
// error carrying one. A provider should stop sending to the token unless
// the app registered it again after that time.
func InvalidSince(err error) (time.Time, bool) {
	var e *channels.Error
	if !errors.As(err, &e) || e.Channel != channel {
		return time.Time{}, false
	}
	_, s, ok := strings.Cut(e.Detail, "timestamp=")
	if !ok {
		return time.Time{}, false
	}
	if i := strings.IndexByte(s, ' '); i >= 0 {
		s = s[:i]
	}
	ms, err := strconv.ParseInt(s, 10, 64)
	if err != nil {
		return time.Time{}, false
	}
	return time.UnixMilli(ms), true
}

// redactError hides the device token in the text of err; errors.Is and
// errors.As still reach err.
type redactError struct {
	err error
	to  string
}

func (r *redactError) Error() string {
	return strings.ReplaceAll(r.err.Error(), r.to, "[device-token]")
}

func (r *redactError) Unwrap() error { return r.err }

// redact returns err with the device token to hidden in its text, and in
// the URL of a *url.Error.
func redact(err error, to string) error {
	if ue, ok := err.(*url.Error); ok {
		err = &url.Error{Op: ue.Op, URL: strings.ReplaceAll(ue.URL, to, "[device-token]"), Err: ue.Err}
	}
	return &redactError{err: err, to: to}
}
