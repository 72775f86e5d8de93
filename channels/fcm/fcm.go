// Package fcm sends messages through Firebase Cloud Messaging HTTP v1
// (POST /v1/projects/{project}/messages:send) and turns every response into
// a [channels.Class].
//
// The pacing key is the Firebase project ID, the recipient a registration
// token. Requests carry an OAuth2 access token minted from a service-account
// key through golang.org/x/oauth2/google and cached until a minute before it
// expires. Responses are classified by the errorCode of the FcmError detail,
// else by the canonical error.status, else by HTTP status; the table is
// [codes], with its sources beside it.
//
// The Firebase Admin SDK is not used: it retries 503s and network errors
// itself, four times, which hides the overload signal from the pacer and can
// send a message twice (providers.md §3.4).
//
// Package fcmtest is a fake FCM for tests and the demo.
package fcm

import (
	"bytes"
	"context"
	"crypto/rsa"
	"crypto/x509"
	"encoding/json"
	"encoding/pem"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"regexp"
	"strings"
	"time"

	"golang.org/x/oauth2"
	"golang.org/x/oauth2/google"

	"github.com/pacerhq/pacer/channels"
	"github.com/pacerhq/pacer/channels/internal/h2pool"
)

// DefaultLimit is the downstream quota of one Firebase project: 600,000
// messages per minute by default, counting messages, not requests, and
// counting client errors (4xx but 429). Beyond it FCM answers 429
// RESOURCE_EXHAUSTED (QUOTA_EXCEEDED) until the quota refills in the
// following minute. The minutes are not aligned to the clock, so any burst
// can push a minute over: Burst is one second of the rate, which bounds the
// overshoot to 1/60. Configure 80-90% of it to leave headroom (providers.md
// §6.2), and more once Google grants a quota increase.
var DefaultLimit = channels.Limit{
	PerSecond: 10000, // 600,000 per minute
	Burst:     10000,
	Source:    "https://firebase.google.com/docs/cloud-messaging/throttling-and-quotas (providers.md §3.1, sources read 2026-08)",
}

// DeviceLimit is the rate at which one Android device may receive: 240
// messages per minute and 5,000 per hour. One token bucket keeps both when
// its burst plus a minute of refill stays within 240 and its burst plus an
// hour of refill within 5,000: 80 per minute (4/3 per second) with a burst
// of 160 allows 240 in the first minute and 4,960 in any hour. A bucket of
// 240 per minute alone would allow 14,400 an hour. Beyond it FCM answers 429
// QUOTA_EXCEEDED for the device; Apple devices get APNs' own limits.
var DeviceLimit = channels.Limit{
	PerSecond: 4.0 / 3,
	Burst:     160,
	Source:    "https://firebase.google.com/docs/cloud-messaging/throttling-and-quotas (per-device limits; providers.md §3.1, sources read 2026-08)",
}

const (
	channel = "fcm"

	// DefaultBaseURL is the FCM host used when Config.BaseURL is empty.
	DefaultBaseURL = "https://fcm.googleapis.com"
	// DefaultTimeout is the timeout of the HTTP client made when Config.HTTPClient is nil.
	DefaultTimeout = 30 * time.Second
	// Scope is the OAuth2 scope requested for the access token.
	Scope = "https://www.googleapis.com/auth/firebase.messaging"

	maxDetail   = 200     // bytes of error.message kept in channels.Error.Detail
	maxBodySize = 1 << 20 // bytes of a response body read
)

// Config configures a [Client]. Exactly one of CredentialsJSON and
// TokenSource is required; the zero value of every other field means its
// default.
type Config struct {
	// BaseURL is the scheme and host of the FCM API, optionally with a path
	// prefix; default [DefaultBaseURL]. Tests point it at a fake.
	BaseURL string
	// CredentialsJSON is a service-account JSON key, as downloaded from the
	// Google Cloud console. Its token_uri is where access tokens are
	// requested (Google's own when absent); it must be https, or http to a
	// loopback address (a local fake). No part of it appears in an error.
	CredentialsJSON []byte
	// TokenSource, instead of CredentialsJSON, supplies access tokens, for
	// tests and for credentials found another way (workload identity). The
	// Client caches its tokens like its own. Its Token method takes no ctx,
	// so Send cannot cancel a token request it makes; with CredentialsJSON,
	// Send's ctx bounds the token request.
	TokenSource oauth2.TokenSource
	// HTTPClient sends the FCM requests and the token requests; default a
	// client with a [DefaultTimeout] timeout on a pool of HTTP/2
	// connections (FCM offers HTTP/2 in its TLS handshake), each carrying
	// as many requests at once as the server allows streams, a new one
	// dialed only when every open one is full; HTTP/1.1 keep-alive to a
	// host without HTTP/2.
	HTTPClient *http.Client
	// MaxIdleConnsPerHost is how many idle connections to the provider the
	// default client keeps for reuse; default
	// [channels.DefaultMaxIdleConnsPerHost]. Set it to at least the sends a
	// process has in flight at once. Ignored when HTTPClient is set.
	MaxIdleConnsPerHost int
	// H2C makes the default client speak HTTP/2 without TLS (h2c, prior
	// knowledge) to an http:// BaseURL, as a local fake such as `pacer
	// fake-provider` takes it; without, HTTP/1.1 there. FCM itself is
	// https, where HTTP/2 is used when offered in the TLS handshake.
	// Ignored when HTTPClient is set.
	H2C bool
	// DataIDKey, if set, makes Send add message.data[DataIDKey] = m.ID
	// unless the payload sets that key. The app then sees the envelope id,
	// which lets it drop the duplicates that retried 503s can cause; with
	// "pacer_id", fcmtest reports it as Arrival.ID. Default "": the data
	// map is sent as given.
	DataIDKey string
}

// Client is a [channels.Sender] for FCM HTTP v1. It is safe for concurrent
// use.
type Client struct {
	base    *url.URL
	hc      *http.Client
	tokens  *tokens
	secrets []string // strings of the key to keep out of error text
	dataID  string
	quota   quotaRefusals // QUOTA_EXCEEDED refusals of unknown scope
}

var _ channels.Sender = (*Client)(nil)

// New returns a Client for cfg. It returns an error naming the field if
// neither or both of CredentialsJSON and TokenSource are set, if
// CredentialsJSON is not a service-account key with a client_email, an RSA
// private_key and a usable token_uri, or if BaseURL is not an absolute http
// or https URL. The error never contains key material.
//
// New makes no request: the first Send fetches the first token. ctx is used
// only while New runs.
func New(ctx context.Context, cfg Config) (*Client, error) {
	if cfg.BaseURL == "" {
		cfg.BaseURL = DefaultBaseURL
	}
	base, err := url.Parse(cfg.BaseURL)
	// The value and url.Parse's error (which quotes it) are left out: a
	// misplaced secret could sit in it.
	if err != nil || (base.Scheme != "http" && base.Scheme != "https") || base.Host == "" {
		return nil, errors.New("fcm: Config.BaseURL is not an absolute http or https URL")
	}
	if cfg.HTTPClient == nil {
		cfg.HTTPClient = &http.Client{Timeout: DefaultTimeout, Transport: h2pool.Default("fcm", cfg.MaxIdleConnsPerHost, cfg.H2C, &conns)}
	}
	c := &Client{base: base, hc: cfg.HTTPClient, dataID: cfg.DataIDKey}
	switch {
	case len(cfg.CredentialsJSON) > 0 && cfg.TokenSource != nil:
		return nil, errors.New("fcm: set only one of Config.CredentialsJSON and Config.TokenSource")
	case cfg.TokenSource != nil:
		c.tokens = newTokens(sourceFetch(cfg.TokenSource))
	case len(cfg.CredentialsJSON) > 0:
		sa, err := checkCredentials(cfg.CredentialsJSON)
		if err != nil {
			return nil, err
		}
		// Parse it as oauth2/google will at each refresh, so that a key it
		// refuses fails here, not on the first Send.
		if _, err := google.CredentialsFromJSONWithType(ctx, cfg.CredentialsJSON, google.ServiceAccount, Scope); err != nil {
			return nil, errors.New("fcm: Config.CredentialsJSON is not a usable service-account key")
		}
		c.secrets = keySecrets(sa.PrivateKey)
		c.tokens = newTokens(jsonFetch(bytes.Clone(cfg.CredentialsJSON), cfg.HTTPClient))
	default:
		return nil, errors.New("fcm: Config.CredentialsJSON or Config.TokenSource is required")
	}
	return c, nil
}

var credentialType = regexp.MustCompile(`^[a-z_]{1,40}$`)

// checkCredentials checks the fields of a service-account key that
// oauth2/google would only trip over at the first token request.
func checkCredentials(b []byte) (serviceAccount, error) {
	var sa serviceAccount
	if err := json.Unmarshal(b, &sa); err != nil {
		var se *json.SyntaxError
		if errors.As(err, &se) {
			return sa, fmt.Errorf("fcm: Config.CredentialsJSON is not valid JSON (offset %d)", se.Offset)
		}
		return sa, errors.New("fcm: Config.CredentialsJSON is not a service-account key object")
	}
	if sa.Type != string(google.ServiceAccount) {
		if credentialType.MatchString(sa.Type) {
			return sa, fmt.Errorf("fcm: Config.CredentialsJSON has type %q, want %q", sa.Type, google.ServiceAccount)
		}
		return sa, fmt.Errorf("fcm: Config.CredentialsJSON is not of type %q", google.ServiceAccount)
	}
	if sa.ClientEmail == "" {
		return sa, errors.New("fcm: Config.CredentialsJSON has no client_email")
	}
	if !isRSAKey(sa.PrivateKey) {
		return sa, errors.New("fcm: Config.CredentialsJSON private_key is not a PEM-encoded RSA private key")
	}
	if sa.TokenURI != "" && !tokenURIAllowed(sa.TokenURI) {
		return sa, errors.New("fcm: Config.CredentialsJSON token_uri is not an https URL (or http to a loopback address)")
	}
	return sa, nil
}

// isRSAKey reports whether s is an RSA private key as oauth2/google reads
// it: PEM (or bare DER) holding PKCS#8 or PKCS#1.
func isRSAKey(s string) bool {
	b := []byte(s)
	if block, _ := pem.Decode(b); block != nil {
		b = block.Bytes
	}
	if k, err := x509.ParsePKCS8PrivateKey(b); err == nil {
		_, ok := k.(*rsa.PrivateKey)
		return ok
	}
	_, err := x509.ParsePKCS1PrivateKey(b)
	return err == nil
}

// tokenURIAllowed reports whether the signed assertion may be posted to u:
// over https, or over http to a loopback host (a fake in a test). The
// assertion is a credential for an hour; it must not cross a network in the
// clear.
func tokenURIAllowed(u string) bool {
	p, err := url.Parse(u)
	if err != nil || p.Host == "" {
		return false
	}
	switch p.Scheme {
	case "https":
		return true
	case "http":
		h := p.Hostname()
		if h == "localhost" {
			return true
		}
		ip := net.ParseIP(h)
		return ip != nil && ip.IsLoopback()
	}
	return false
}

// keySecrets returns the strings of a PEM key to redact: the whole key and
// each of its base64 lines.
func keySecrets(key string) []string {
	s := []string{key}
	for line := range strings.Lines(key) {
		line = strings.TrimSpace(line)
		if len(line) >= 16 && !strings.HasPrefix(line, "-----") {
			s = append(s, line)
		}
	}
	return s
}

// Send posts m to /v1/projects/{m.Key}/messages:send with the body
// {"message":{...m.Payload..., "token": m.To}}: the payload (a JSON object
// of notification, data, android, apns, webpush... or empty) with token set
// over it. If Config.DataIDKey is set, m.ID is added to message.data.
//
// On HTTP 200 with a name, Send returns it as Result.ProviderID
// ("projects/{project}/messages/{id}"): FCM accepted the message, which is
// not yet delivered. Otherwise it returns a *[channels.Error]:
//   - an empty or dot-segment m.Key: Permanent, Code "invalid-key"; an
//     empty m.To: Permanent, Code "invalid-recipient"; a payload that is
//     not a JSON object (or whose data is not one, with DataIDKey):
//     Permanent, Code "invalid-payload"; data and notification over
//     [MaxPayload] bytes: Permanent, Code [CodePayloadTooLarge]. No request
//     is made: FCM counts client errors against the project quota.
//   - no access token: Halt, Code "oauth2", with a Detail saying why (the
//     token endpoint's status and OAuth2 error, never its body, or the
//     transport error) and Err unwrapping to the token source's error; no
//     FCM request is made. A token endpoint that is down halts the key too:
//     nothing can be sent without a token, and a Halt is retried after a
//     cooldown without spending the message's attempts.
//   - a Google error body: classified by code through [codes] (the FcmError
//     errorCode, else error.status, which becomes Code); an unknown code by
//     HTTP status (429 Throttle, 5xx Transient, 401 and 403 Halt, others
//     Permanent).
//   - any other non-200 body: by HTTP status as above, with Err describing
//     the body.
//   - a 2xx body without a name: Transient, with Err.
//   - a transport failure: Transient, with Err.
//
// A Throttle's scope is what its body says in the shapes Google documents
// or was seen to send (see [throttleScope]): the project for the
// ErrorInfo of a per-project quota, the pair (project, token) for an
// ApnsError relaying APNs' per-device 429. Any other QUOTA_EXCEEDED, which
// FCM answers alike for the project's quota and for one device's, is
// ScopePair for the first token refused and ScopeKey once a second,
// different token of the project is refused within [QuotaWindow]; any
// other throttle (RESOURCE_EXHAUSTED without an FcmError, a 429 without a
// Google body) is ScopeKey. A Retry-After header
// (delta-seconds or HTTP-date) sets RetryAfter; a project throttle waits at
// least [QuotaCooldown]. A 5xx carries Retry-After as sent: the pacer
// waits at least [ServerRetry] (PACER_FCM_SERVER_RETRY) before its retry.
//
// A 401 UNAUTHENTICATED means the access token was refused: Send drops it,
// fetches a new one and sends once more, since FCM accepted nothing; a
// second refusal, or no new token to try, is a Halt. THIRD_PARTY_AUTH_ERROR
// (the project's APNs or web push credentials are invalid) is Permanent for
// this message and not retried: a new token cannot fix it, and since only
// iOS and web targets fail, the project's Android sends must go on.
//
// Detail is error.message cut to 200 bytes, with the access token and m.To
// removed. If ctx ends before a response, Send returns ctx.Err() itself.
func (c *Client) Send(ctx context.Context, m channels.Message) (channels.Result, error) {
	if m.Key == "" || m.Key == "." || m.Key == ".." {
		return channels.Result{}, &channels.Error{Channel: channel, Class: channels.Permanent,
			Code: "invalid-key", Detail: "pacing key is not a Firebase project ID"}
	}
	if m.To == "" {
		return channels.Result{}, &channels.Error{Channel: channel, Class: channels.Permanent,
			Code: "invalid-recipient", Detail: "empty registration token"}
	}
	body, size, err := c.requestBody(m)
	if err != nil {
		return channels.Result{}, &channels.Error{Channel: channel, Class: channels.Permanent,
			Code: "invalid-payload", Detail: "payload is not a JSON object of message fields", Err: err}
	}
	if size > MaxPayload {
		return channels.Result{}, &channels.Error{Channel: channel, Class: channels.Permanent,
			Code: CodePayloadTooLarge, Detail: fmt.Sprintf("data and notification hold %d bytes, at most %d allowed", size, MaxPayload)}
	}
	u := c.base.JoinPath("v1", "projects", url.PathEscape(m.Key), "messages:send").String()

	tok, err := c.tokens.get(ctx)
	if err != nil {
		return channels.Result{}, c.tokenError(ctx, err, m.To)
	}
	res, err := c.post(ctx, u, body, tok.AccessToken, m.Key, m.To)
	if !unauthenticated(err) {
		return res, err
	}
	// One refresh-and-retry: FCM refused the token and accepted nothing.
	c.tokens.invalidate(tok.AccessToken)
	next, terr := c.tokens.get(ctx)
	if terr != nil {
		return channels.Result{}, c.tokenError(ctx, terr, m.To)
	}
	if next.AccessToken == tok.AccessToken { // the source has nothing newer
		return res, err
	}
	return c.post(ctx, u, body, next.AccessToken, m.Key, m.To)
}

// unauthenticated reports whether err is FCM's refusal of the access token.
func unauthenticated(err error) bool {
	var e *channels.Error
	return errors.As(err, &e) && e.Code == "UNAUTHENTICATED"
}

// post sends one request and classifies the answer.
func (c *Client) post(ctx context.Context, u string, body []byte, access, project, to string) (channels.Result, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, u, bytes.NewReader(body))
	if err != nil { // only a nil ctx gets here: the URL was checked in New
		return channels.Result{}, &channels.Error{Channel: channel, Class: channels.Permanent, Err: err}
	}
	req.Header.Set("Authorization", "Bearer "+access)
	req.Header.Set("Content-Type", "application/json; charset=utf-8")
	req.Header.Set("Accept", "application/json")

	resp, err := channels.DoSend(ctx, c.hc, req, channel) // its error names the host and project, never the header
	if err != nil {
		return channels.Result{}, err
	}
	raw, err := channels.ReadBody(resp.Body, maxBodySize)
	if err != nil {
		if ctx.Err() != nil {
			return channels.Result{}, ctx.Err()
		}
		return channels.Result{}, &channels.Error{Channel: channel, Status: resp.StatusCode,
			Class: channels.Transient, Err: fmt.Errorf("fcm: read response: %w", err)}
	}
	if resp.StatusCode >= 200 && resp.StatusCode < 300 {
		return success(resp.StatusCode, raw)
	}
	return channels.Result{}, c.failure(resp, raw, []string{access, to}, project, to, time.Now())
}

// MaxPayload is the most bytes the keys and values of message.data and
// message.notification may hold together in a message to a registration
// token; FCM refuses more with 400 INVALID_ARGUMENT ("Message too big").
// FCM counts such client errors against the project's quota, so Send
// refuses the message itself, without a request, as Permanent with Code
// [CodePayloadTooLarge]. Topic messages (2048 bytes) are not sent by this
// adapter.
//
// Sources: https://firebase.google.com/docs/reference/fcm/rest/v1/ErrorCode
// (INVALID_ARGUMENT: "4096 bytes for most messages ... This includes both
// the keys and the values") and
// https://firebase.google.com/docs/cloud-messaging/throttling-and-quotas
// ("Client errors (HTTP status code 400-499) are counted (excluding 429s)").
const MaxPayload = 4096

// CodePayloadTooLarge is the Code of the Permanent error for a message over
// [MaxPayload].
const CodePayloadTooLarge = "payload-too-large"

// payloadSize returns the bytes of the keys and values of the data and
// notification objects of msg: string values count their decoded length,
// other values their JSON text.
func payloadSize(msg map[string]json.RawMessage) int {
	n := 0
	for _, part := range []string{"data", "notification"} {
		var fields map[string]json.RawMessage
		if json.Unmarshal(msg[part], &fields) != nil {
			continue
		}
		for k, v := range fields {
			n += len(k)
			var str string
			if json.Unmarshal(v, &str) == nil {
				n += len(str)
			} else {
				n += len(bytes.TrimSpace(v))
			}
		}
	}
	return n
}

// requestBody returns {"message": m.Payload + token} and the size of its
// payload ([payloadSize]). Payload field values are kept byte for byte.
func (c *Client) requestBody(m channels.Message) ([]byte, int, error) {
	msg := map[string]json.RawMessage{}
	p := bytes.TrimSpace(m.Payload)
	if len(p) > 0 && !bytes.Equal(p, []byte("null")) {
		if p[0] != '{' {
			return nil, 0, errors.New("fcm: payload is not a JSON object")
		}
		if err := json.Unmarshal(p, &msg); err != nil {
			return nil, 0, fmt.Errorf("fcm: decode payload: %w", err)
		}
	}
	token, _ := json.Marshal(m.To) // a string always marshals
	msg["token"] = token
	if c.dataID != "" && m.ID != "" {
		data := map[string]json.RawMessage{}
		if d := bytes.TrimSpace(msg["data"]); len(d) > 0 && !bytes.Equal(d, []byte("null")) {
			if d[0] != '{' {
				return nil, 0, errors.New("fcm: payload data is not a JSON object")
			}
			if err := json.Unmarshal(d, &data); err != nil {
				return nil, 0, fmt.Errorf("fcm: decode payload data: %w", err)
			}
		}
		if _, ok := data[c.dataID]; !ok {
			data[c.dataID], _ = json.Marshal(m.ID)
			msg["data"], _ = json.Marshal(data)
		}
	}
	b, err := json.Marshal(struct {
		Message map[string]json.RawMessage `json:"message"`
	}{msg})
	return b, payloadSize(msg), err
}

// success reads the message name from a 2xx body.
func success(status int, raw []byte) (channels.Result, error) {
	var ok struct {
		Name string `json:"name"`
	}
	err := json.Unmarshal(raw, &ok)
	if err == nil && ok.Name != "" {
		return channels.Result{ProviderID: ok.Name}, nil
	}
	if err == nil {
		err = errors.New("fcm: success body has no name")
	} else {
		err = fmt.Errorf("fcm: decode success body: %w", err)
	}
	return channels.Result{}, &channels.Error{Channel: channel, Status: status, Class: channels.Transient, Err: err}
}

// failure builds the *channels.Error for a non-2xx response to a send to
// the registration token to of project.
func (c *Client) failure(resp *http.Response, raw []byte, secrets []string, project, to string, now time.Time) *channels.Error {
	e := &channels.Error{
		Channel:    channel,
		Status:     resp.StatusCode,
		RetryAfter: channels.ParseRetryAfter(resp.Header.Get("Retry-After"), now),
	}
	var ae apiError
	var ds []detail
	if err := json.Unmarshal(raw, &ae); err != nil || ae.Error == nil {
		if err == nil {
			err = errors.New("no error object in body")
		}
		e.Class = statusClass(resp.StatusCode)
		e.Err = fmt.Errorf("fcm: HTTP %d without a Google error body: %w", resp.StatusCode, err)
	} else {
		ds = decodeDetails(ae.Error.Details)
		e.Code = errorCode(ds, ae.Error.Status)
		e.Detail = redact(ae.Error.Message, secrets)
		if class, ok := codes[e.Code]; ok {
			e.Class = class
		} else {
			e.Class = statusClass(resp.StatusCode)
		}
		// "The app instance was unregistered from FCM ... stop using this
		// registration token" [F-EC]: the token is dead for the project.
		e.Gone = e.Code == "UNREGISTERED"
	}
	if e.Class == channels.Throttle {
		scope, known := throttleScope(ds)
		if !known && e.Code == "QUOTA_EXCEEDED" {
			scope = c.quota.scope(project, to, now)
		}
		e.Scope = scope
		if e.Scope == channels.ScopeKey {
			e.RetryAfter = max(e.RetryAfter, QuotaCooldown)
		}
	}
	return e
}

// tokenError builds the Halt for a failed token fetch, or returns ctx.Err()
// if ctx ended. The error text is built without the token endpoint's body
// and without key material.
func (c *Client) tokenError(ctx context.Context, err error, to string) error {
	if ctx.Err() != nil {
		return ctx.Err()
	}
	secrets := append([]string{to}, c.secrets...)
	if t := c.tokens.cur.Load(); t != nil {
		secrets = append(secrets, t.AccessToken)
	}
	return &channels.Error{Channel: channel, Class: channels.Halt, Code: "oauth2",
		Detail: describeTokenError(err, secrets),
		Err:    &redactedError{msg: "fcm: no access token", err: err}}
}

// conns counts the connections of every default client of the package.
var conns channels.ConnCounter

// Connections returns the counter of the connections the package's
// default clients (Config.HTTPClient nil) opened to FCM.
func Connections() *channels.ConnCounter { return &conns }

// NewHTTPClient returns a client as New makes when Config.HTTPClient is
// nil (with Config.H2C h2c), for several clients to share: its
// connections are counted in [Connections].
func NewHTTPClient(h2c bool) *http.Client {
	return &http.Client{Timeout: DefaultTimeout, Transport: h2pool.Default("fcm", 0, h2c, &conns)}
}
