// Package sendgrid sends email through the Twilio SendGrid v3 Mail Send API
// (POST /v3/mail/send) and turns every response into a [channels.Class].
//
// # Message
//
// A [channels.Message] maps onto one mail to one recipient:
//
//   - Key is the pacing key: the name of an API key in Config.APIKeys, so
//     each SendGrid account (or subuser, through Config.OnBehalfOf) is paced
//     on its own. The secret stays in the Config: never in a Message, never
//     in an error.
//   - To is the recipient address: personalizations[0].to[0].email.
//   - ID is sent as personalizations[0].custom_args.pacer_id, which SendGrid
//     echoes in every Event Webhook event of the mail; Campaign, when set,
//     as custom_args.pacer_campaign, echoed the same way.
//   - Payload is the mail body without personalizations: a JSON object with
//     from, subject, content, template_id, reply_to, attachments,
//     categories, mail_settings and so on, kept as sent (less insignificant
//     whitespace; <, > and & are not escaped). Its optional
//     "personalization" (singular) object holds per-recipient fields
//     (dynamic_template_data, subject, cc, bcc, headers, substitutions,
//     send_at, custom_args) and becomes personalizations[0].
//
// For the payload
//
//	{"from":{"email":"news@example.com"},"template_id":"d-1234",
//	 "personalization":{"dynamic_template_data":{"name":"Ada"},"custom_args":{"campaign":"c9"}}}
//
// Send posts
//
//	{"from":{"email":"news@example.com"},"template_id":"d-1234",
//	 "personalizations":[{"to":[{"email":"<m.To>"}],"dynamic_template_data":{"name":"Ada"},
//	   "custom_args":{"campaign":"c9","pacer_id":"<m.ID>"}}]}
//
// to, custom_args.pacer_id and custom_args.pacer_campaign (when the
// message has a campaign) are ours: a payload value for them is replaced.
// A payload with "personalizations" (plural) is refused, since the adapter
// sends exactly one recipient per message.
//
// # Responses
//
// SendGrid has no error codes, so responses are classified by HTTP status,
// and a 403 by its message; the table is [statuses], with its sources. A
// 429 carries X-RateLimit-Reset as Unix epoch seconds, not a delay; Go
// canonicalises that header to X-Ratelimit-Reset, which is why this package
// reads headers with http.Header.Get and does not use sendgrid-go, whose
// retry helper looks the header up by its documented spelling and never
// finds it (providers.md §4.4).
//
// Package sendgridtest is a fake Mail Send API for tests and the demo.
package sendgrid

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"net/http"
	"net/url"
	"regexp"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/pacerhq/pacer/channels"
	"github.com/pacerhq/pacer/channels/internal/h2pool"
)

// DefaultLimit is the rate assumed for one API key (one pacing key) when
// none is configured: 100 requests per second, a burst of one second.
//
// SendGrid publishes no rate for /v3/mail/send: the v3 rate-limit page says
// each endpoint has "a fixed number of requests per refresh period" and
// gives example numbers only, a 2016 beta page said 3,000 requests/s, a
// third party claims 10,000, and the 600 requests/min set on v2 endpoints
// excludes mail/send (providers.md §4.1, all UNCONFIRMED). 100/s is the
// conservative start providers.md §6.2 recommends: a thirtieth of the only
// number SendGrid ever printed, yet 360,000 mails an hour, more than most
// plans may send. AIMD finds the real ceiling from 429s, whose
// X-RateLimit-Reset Send returns as RetryAfter; raise the limit per key when
// an account is known to take more.
var DefaultLimit = channels.Limit{
	PerSecond: 100,
	Burst:     100,
	Source: "no published mail/send rate: https://www.twilio.com/docs/sendgrid/api-reference/how-to-use-the-sendgrid-v3-api/rate-limits " +
		"and https://twilio.com/docs/sendgrid/for-developers/sending-email/v3-mail-send-faq (providers.md §4.1); " +
		"100/s is providers.md §6.2's conservative start, read 2026-11-30",
}

const (
	channel = "sendgrid"

	// DefaultBaseURL is the Mail Send host used when Config.BaseURL is empty.
	DefaultBaseURL = "https://api.sendgrid.com"
	// EUBaseURL is the host for EU regional subusers (providers.md §4.2, [S-MS]).
	EUBaseURL = "https://api.eu.sendgrid.com"
	// DefaultTimeout is the timeout of the HTTP client made when Config.HTTPClient is nil.
	DefaultTimeout = 30 * time.Second

	// MaxBodyBytes is the largest request body Send posts, in bytes: SendGrid
	// takes mails of less than 30 MB, attachments included ([S-LIM]). A
	// larger one is Permanent with Code "payload-too-large" and is not sent.
	MaxBodyBytes = 30 << 20

	maxDetail   = 200     // bytes of channels.Error.Detail
	maxRespSize = 1 << 20 // bytes of a response body read
)

// Config configures a [Client]. The zero value of every field but APIKeys
// means its default.
type Config struct {
	// BaseURL is the scheme and host of the API, optionally with a path
	// prefix; default [DefaultBaseURL]. Use [EUBaseURL] for EU regional
	// subusers; tests point it at a fake.
	BaseURL string
	// APIKeys maps an API key name, the pacing key (Message.Key), to its
	// secret, sent as "Authorization: Bearer". Required, at least one entry;
	// names and secrets must be non-empty. Secrets never appear in an error.
	APIKeys map[string]string
	// OnBehalfOf maps an API key name to the subuser it sends as, sent as
	// the On-Behalf-Of header (a subuser's username, or "account-id <id>").
	// Optional; every name must be in APIKeys.
	OnBehalfOf map[string]string
	// HTTPClient sends the requests; default a client with a
	// [DefaultTimeout] timeout on a pool of HTTP/2 connections when
	// SendGrid offers HTTP/2 in the TLS handshake (each carrying many
	// requests at once), of HTTP/1.1 keep-alive ones otherwise. Whether api.sendgrid.com offers
	// HTTP/2 is UNCONFIRMED: SendGrid documents HTTPS only ("All requests
	// must be made over HTTPS. The API does not support HTTP.", TLS 1.2 or
	// later since 2023-06-05) and writes its examples as HTTP/1.1, never
	// naming HTTP/2 (https://www.twilio.com/docs/sendgrid/api-reference/how-to-use-the-sendgrid-v3-api/requests,
	// https://www.twilio.com/docs/sendgrid/for-developers/sending-email/support-for-tls-12).
	HTTPClient *http.Client
	// MaxIdleConnsPerHost is how many idle connections to the provider the
	// default client keeps for reuse; default
	// [channels.DefaultMaxIdleConnsPerHost]. Set it to at least the sends a
	// process has in flight at once. Ignored when HTTPClient is set.
	MaxIdleConnsPerHost int
	// H2C makes the default client speak HTTP/2 without TLS (h2c, prior
	// knowledge) to an http:// BaseURL, as a local fake such as `pacer
	// fake-provider` takes it; without, HTTP/1.1 there. SendGrid itself is
	// https, where HTTP/2 is used when offered in the TLS handshake.
	// Ignored when HTTPClient is set.
	H2C bool
	// Now returns the current time, to turn X-RateLimit-Reset and
	// Retry-After into delays; default time.Now.
	Now func() time.Time
}

// key is what the Client holds for one API key name.
type key struct {
	auth       string // "Bearer <secret>"
	onBehalfOf string // "" if none
}

// Client is a [channels.Sender] for SendGrid v3 Mail Send. It is safe for
// concurrent use.
type Client struct {
	url     string         // {base}/v3/mail/send
	keys    map[string]key // by name
	secrets []string       // every secret, longest first, for redaction
	hc      *http.Client
	now     func() time.Time

	mu       sync.Mutex
	identity map[string]int // by API key name: sender-identity 403s in a row
}

var _ channels.Sender = (*Client)(nil)

// New returns a Client for cfg. It copies the maps, so later changes to cfg
// do not affect the Client. It returns an error naming the field if
// Config.APIKeys is empty or has an empty name or secret, a secret or an
// OnBehalfOf value is not a valid header value, Config.OnBehalfOf names a
// key not in APIKeys, or Config.BaseURL is not an absolute http or https
// URL. The error never contains a secret.
func New(cfg Config) (*Client, error) {
	if len(cfg.APIKeys) == 0 {
		return nil, errors.New("sendgrid: Config.APIKeys is empty")
	}
	c := &Client{keys: make(map[string]key, len(cfg.APIKeys)), hc: cfg.HTTPClient, now: cfg.Now}
	for _, name := range slices.Sorted(maps.Keys(cfg.APIKeys)) { // sorted: the same config always gives the same error
		secret := cfg.APIKeys[name]
		switch {
		case name == "":
			return nil, errors.New("sendgrid: Config.APIKeys has an empty name")
		case secret == "":
			return nil, fmt.Errorf("sendgrid: Config.APIKeys[%q] is empty", name)
		case !token(secret):
			return nil, fmt.Errorf("sendgrid: Config.APIKeys[%q] has characters not allowed in a header", name)
		}
		c.keys[name] = key{auth: "Bearer " + secret}
		c.secrets = append(c.secrets, secret)
	}
	for _, name := range slices.Sorted(maps.Keys(cfg.OnBehalfOf)) {
		sub := cfg.OnBehalfOf[name]
		k, ok := c.keys[name]
		switch {
		case !ok:
			return nil, fmt.Errorf("sendgrid: Config.OnBehalfOf[%q] names no key in Config.APIKeys", name)
		case sub == "" || strings.TrimSpace(sub) != sub || strings.ContainsFunc(sub, func(r rune) bool { return r < ' ' || r == 0x7f }):
			return nil, fmt.Errorf("sendgrid: Config.OnBehalfOf[%q] is not a valid header value", name)
		}
		k.onBehalfOf = sub
		c.keys[name] = k
	}
	// Longest first, so a secret that contains another is removed whole.
	slices.SortFunc(c.secrets, func(a, b string) int { return len(b) - len(a) })

	if cfg.BaseURL == "" {
		cfg.BaseURL = DefaultBaseURL
	}
	base, err := url.Parse(cfg.BaseURL)
	// The value and url.Parse's error (which quotes it) are left out: a
	// misplaced secret could sit in it.
	if err != nil || (base.Scheme != "http" && base.Scheme != "https") || base.Host == "" {
		return nil, errors.New("sendgrid: Config.BaseURL is not an absolute http or https URL")
	}
	c.url = base.JoinPath("v3", "mail", "send").String()
	if c.hc == nil {
		c.hc = &http.Client{Timeout: DefaultTimeout, Transport: h2pool.Default("sendgrid", cfg.MaxIdleConnsPerHost, cfg.H2C, &conns)}
	}
	if c.now == nil {
		c.now = time.Now
	}
	return c, nil
}

// token reports whether s is visible ASCII only, as API keys are.
func token(s string) bool {
	for i := range len(s) {
		if s[i] <= ' ' || s[i] >= 0x7f {
			return false
		}
	}
	return true
}

// Send posts one mail for m to {BaseURL}/v3/mail/send with the secret of
// API key m.Key, and On-Behalf-Of when Config.OnBehalfOf names a subuser for
// it. The body is built as the package documentation shows.
//
// On HTTP 2xx Send returns X-Message-Id as Result.ProviderID ("" if the
// header is missing): SendGrid answers 202 when it queued the mail (not yet
// delivered; drops show only in the Event Webhook) and 200 in sandbox mode.
// Otherwise it returns a *[channels.Error]:
//   - m.Key not in Config.APIKeys: Halt, Code "unknown-api-key";
//   - an empty m.To: Permanent, Code "invalid-recipient";
//   - a payload that is not a JSON object, sets "personalizations", or has a
//     "personalization" or personalization.custom_args that is not an
//     object: Permanent, Code "invalid-payload";
//   - a request body over [MaxBodyBytes]: Permanent, Code "payload-too-large";
//   - any other status: classified through [statuses], with Code "": 429
//     Throttle; 500, 502, 503, 504 Transient; 400, 406, 413 Permanent; 401
//     and 451 (data residency: the key's account is served by a regional
//     host such as [EUBaseURL]) Halt; 403 Halt, but Throttle when SendGrid
//     says the account is "temporarily blocked" for repeated bad requests,
//     and Permanent with Code [CodeSenderIdentity] when the from address
//     is not a verified Sender Identity (a Halt from the
//     [SenderIdentityHalt]th in a row for the key). Err is set when the
//     body is not a SendGrid error body;
//   - a transport failure: Transient, with Err.
//
// None of the first four sends a request. Scope is always ScopeKey. For a
// 429, RetryAfter is the time until X-RateLimit-Reset (Unix epoch seconds),
// or else what Retry-After asks for; for the 403 block it is at least
// [BlockCooldown]; for any other status, Retry-After if present. Detail
// lists the body's errors as "field: message" (at most 200 bytes) with API
// keys and email addresses, the recipient's among them, removed. If ctx ends
// before a response, Send returns ctx.Err() itself.
func (c *Client) Send(ctx context.Context, m channels.Message) (channels.Result, error) {
	k, ok := c.keys[m.Key]
	if !ok {
		// m.Key is left out of Detail: a secret put there by mistake must not be logged.
		return channels.Result{}, &channels.Error{Channel: channel, Class: channels.Halt,
			Code: "unknown-api-key", Detail: "the pacing key names no API key in Config.APIKeys"}
	}
	if m.To == "" {
		return channels.Result{}, &channels.Error{Channel: channel, Class: channels.Permanent,
			Code: "invalid-recipient", Detail: "empty recipient address"}
	}
	if len(m.Payload) > MaxBodyBytes {
		return channels.Result{}, tooLarge(len(m.Payload))
	}
	body, err := requestBody(m)
	if err != nil {
		return channels.Result{}, &channels.Error{Channel: channel, Class: channels.Permanent,
			Code: "invalid-payload", Detail: err.Error()}
	}
	if len(body) > MaxBodyBytes {
		return channels.Result{}, tooLarge(len(body))
	}

	req, err := http.NewRequestWithContext(ctx, http.MethodPost, c.url, bytes.NewReader(body))
	if err != nil { // only a nil ctx gets here: the URL was checked in New
		return channels.Result{}, &channels.Error{Channel: channel, Class: channels.Permanent, Err: err}
	}
	req.Header.Set("Authorization", k.auth)
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/json") // without it SendGrid may answer 406 [S-RESP]
	if k.onBehalfOf != "" {
		req.Header.Set("On-Behalf-Of", k.onBehalfOf)
	}

	resp, err := channels.DoSend(ctx, c.hc, req, channel) // its error names the host and path, never a header
	if err != nil {
		return channels.Result{}, err
	}
	raw, err := channels.ReadBody(resp.Body, maxRespSize)
	if resp.StatusCode >= 200 && resp.StatusCode < 300 {
		// The status decides: a 202 whose body was cut off is still queued.
		c.identityRun(m.Key, false)
		return channels.Result{ProviderID: resp.Header.Get("X-Message-Id")}, nil
	}
	if err != nil {
		if ctx.Err() != nil {
			return channels.Result{}, ctx.Err()
		}
		return channels.Result{}, &channels.Error{Channel: channel, Status: resp.StatusCode,
			Class: classify(resp.StatusCode, nil), Err: fmt.Errorf("sendgrid: read response: %w", err)}
	}
	e := c.failure(resp, raw, m.To)
	if n := c.identityRun(m.Key, e.Code == CodeSenderIdentity); n >= SenderIdentityHalt {
		e.Class = channels.Halt // most of the key's mail: the account's configuration
	}
	return channels.Result{}, e
}

// identityRun counts key's sender-identity 403s in a row: one more when
// mismatch, else none; it returns the count.
func (c *Client) identityRun(key string, mismatch bool) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	if !mismatch {
		delete(c.identity, key)
		return 0
	}
	if c.identity == nil {
		c.identity = map[string]int{}
	}
	c.identity[key]++
	return c.identity[key]
}

func tooLarge(n int) *channels.Error {
	return &channels.Error{Channel: channel, Class: channels.Permanent, Code: "payload-too-large",
		Detail: fmt.Sprintf("request body of %d bytes or more, over the %d-byte limit", n, MaxBodyBytes)}
}

// requestBody returns m.Payload with personalizations built from m.To, m.ID
// and the payload's "personalization". Payload values are kept as they
// came, less insignificant whitespace, and without HTML escaping. Errors
// say what is wrong without quoting the payload.
func requestBody(m channels.Message) ([]byte, error) {
	fields, err := object(m.Payload, "payload")
	if err != nil {
		return nil, err
	}
	if _, ok := fields["personalizations"]; ok {
		return nil, errors.New(`payload sets "personalizations"; put per-recipient fields in "personalization"`)
	}
	p, err := object(fields["personalization"], "payload personalization")
	if err != nil {
		return nil, err
	}
	delete(fields, "personalization")
	args, err := object(p["custom_args"], "payload personalization.custom_args")
	if err != nil {
		return nil, err
	}
	if m.ID != "" {
		args["pacer_id"] = quote(m.ID)
	}
	if m.Campaign != "" {
		args["pacer_campaign"] = quote(m.Campaign)
	}
	if len(args) > 0 {
		if p["custom_args"], err = encode(args); err != nil {
			return nil, err
		}
	}
	to, _ := json.Marshal([]address{{Email: m.To}}) // a struct of strings always marshals
	p["to"] = to
	if fields["personalizations"], err = encode([]map[string]json.RawMessage{p}); err != nil {
		return nil, err
	}
	return encode(fields)
}

// address is a SendGrid email object.
type address struct {
	Email string `json:"email"`
}

// object decodes raw, a JSON object, null or empty, into its fields; the
// map is never nil. what names raw in the error.
func object(raw json.RawMessage, what string) (map[string]json.RawMessage, error) {
	fields := map[string]json.RawMessage{}
	raw = bytes.TrimSpace(raw)
	if len(raw) == 0 || bytes.Equal(raw, []byte("null")) {
		return fields, nil
	}
	if raw[0] != '{' {
		return nil, fmt.Errorf("%s is not a JSON object", what)
	}
	if err := json.Unmarshal(raw, &fields); err != nil {
		// A SyntaxError names an offset, never the text around it.
		return nil, fmt.Errorf("%s is not valid JSON: %v", what, err)
	}
	return fields, nil
}

// quote returns s as a JSON string.
func quote(s string) json.RawMessage {
	b, _ := json.Marshal(s) // a string always marshals
	return b
}

// encode marshals v without escaping <, > and &, which HTML mail bodies
// are full of.
func encode(v any) ([]byte, error) {
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		return nil, fmt.Errorf("encode request body: %v", err)
	}
	return bytes.TrimSuffix(buf.Bytes(), []byte("\n")), nil
}

// errorBody is the SendGrid error body [S-ERR]:
//
//	{"errors":[{"field":"from.email"|null,"message":"...","help":"..."|null}]}
type errorBody struct {
	Errors []struct {
		Field   json.RawMessage `json:"field"` // a string or null
		Message string          `json:"message"`
	} `json:"errors"`
}

// failure builds the *channels.Error for a non-2xx response.
func (c *Client) failure(resp *http.Response, raw []byte, to string) *channels.Error {
	e := &channels.Error{Channel: channel, Status: resp.StatusCode}
	var b errorBody
	err := json.Unmarshal(raw, &b)
	if err == nil && len(b.Errors) == 0 {
		err = errors.New("no errors[] in body")
	}
	var messages, parts []string
	for _, x := range b.Errors {
		var field string
		_ = json.Unmarshal(x.Field, &field) // null or absent leaves ""
		messages = append(messages, x.Message)
		switch {
		case field != "" && x.Message != "":
			parts = append(parts, field+": "+x.Message)
		case x.Message != "":
			parts = append(parts, x.Message)
		case field != "":
			parts = append(parts, field)
		}
	}
	if err != nil {
		e.Err = fmt.Errorf("sendgrid: HTTP %d without a SendGrid error body: %w", resp.StatusCode, err)
	}
	e.Class = classify(resp.StatusCode, messages)
	if resp.StatusCode == http.StatusForbidden && e.Class == channels.Halt && senderIdentity(messages) {
		e.Class, e.Code = channels.Permanent, CodeSenderIdentity
	}
	e.Detail = c.redact(strings.Join(parts, "; "), to)

	now := c.now()
	retry := channels.ParseRetryAfter(resp.Header.Get("Retry-After"), now)
	switch {
	case resp.StatusCode == http.StatusTooManyRequests:
		// Header.Get canonicalises: it finds X-RateLimit-Reset sent under any spelling.
		if d := channels.ParseResetEpoch(resp.Header.Get("X-RateLimit-Reset"), now); d > 0 {
			retry = d
		}
	case e.Class == channels.Throttle: // the 403 block
		if d := channels.ParseResetEpoch(resp.Header.Get("X-RateLimit-Reset"), now); d > retry {
			retry = d
		}
		retry = max(retry, BlockCooldown)
	}
	e.RetryAfter = retry
	return e
}

// emailLike matches anything shaped like an email address.
var emailLike = regexp.MustCompile(`[^\s"'<>()\[\]{},;:@]+@[^\s"'<>()\[\]{},;:@]+`)

// redact removes every API key secret, the recipient and anything else
// shaped like an email address from s, then cuts it to maxDetail bytes on a
// rune boundary. The recipient is replaced only where it stands alone (not
// inside a longer address or word); anything else address-shaped becomes
// "[address]".
func (c *Client) redact(s, to string) string {
	for _, sec := range c.secrets {
		s = strings.ReplaceAll(s, sec, "[api-key]")
	}
	if to != "" {
		s = channels.ReplaceAddress(s, to, "[recipient]")
	}
	s = emailLike.ReplaceAllString(s, "[address]")
	return channels.Cut(s, maxDetail)
}

// conns counts the connections of every default client of the package.
var conns channels.ConnCounter

// Connections returns the counter of the connections the package's
// default clients (Config.HTTPClient nil) opened to SendGrid.
func Connections() *channels.ConnCounter { return &conns }

// NewHTTPClient returns a client as New makes when Config.HTTPClient is
// nil (with Config.H2C h2c), for several clients to share: its
// connections are counted in [Connections].
func NewHTTPClient(h2c bool) *http.Client {
	return &http.Client{Timeout: DefaultTimeout, Transport: h2pool.Default("sendgrid", 0, h2c, &conns)}
}
