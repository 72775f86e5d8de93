// Package whatsapp sends messages through the Meta WhatsApp Cloud API
// (POST /{version}/{phone-number-id}/messages) and turns every response into
// a [channels.Class].
//
// Responses are classified by the Graph API error.code, never by HTTP status,
// as Meta advises: third parties see HTTP 429 where Meta's table says 400 for
// the same code. The table is [codes]; its sources are listed beside it.
//
// Package whatsapptest is a fake Cloud API for tests and the demo.
package whatsapp

import (
	"bytes"
	"context"
	"crypto/tls"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"
	"unicode/utf8"

	jsonv2 "github.com/go-json-experiment/json"
	"github.com/go-json-experiment/json/jsontext"

	"github.com/pacerhq/pacer/channels"
	"github.com/pacerhq/pacer/channels/internal/h2pool"
)

// Pool is the connection pool a Client sends through: HTTP/2 to the Graph
// API (which offers it over TLS), each connection carrying as many sends
// at once as the server allows streams, a new one dialed only when every
// open one is full; HTTP/1.1 keep-alive, one send per connection, only to
// a host that does not speak HTTP/2, and to an http:// base URL unless the
// Pool was made for h2c. See docs/decisions/0026-whatsapp-over-http2.md.
type Pool = h2pool.Pool

// conns counts the connections of every Pool of the package.
var conns channels.ConnCounter

// Connections returns the counter of the connections the package's Pools
// opened to the Graph API.
func Connections() *channels.ConnCounter { return &conns }

// NewPool returns a Pool of at most maxConns connections per host
// ([channels.DefaultMaxIdleConnsPerHost] when 0 or less), for one or more
// Clients ([Config.Pool]). With h2c it speaks HTTP/2 without TLS (prior
// knowledge) to an http:// base URL, as a local fake such as `pacer
// fake-provider --channel whatsapp` takes it; without, HTTP/1.1 there.
// The Graph API itself is https, where HTTP/2 is offered in the TLS
// handshake either way.
func NewPool(maxConns int, h2c bool) *Pool { return newPool(maxConns, h2c, nil) }

func newPool(maxConns int, h2c bool, tlsConfig *tls.Config) *Pool {
	if maxConns <= 0 {
		maxConns = channels.DefaultMaxIdleConnsPerHost
	}
	return h2pool.New(h2pool.Config{Name: "whatsapp", MaxConns: maxConns, TLSConfig: tlsConfig, H2C: h2c, Conns: &conns})
}

// DefaultRate is the Cloud API throughput of one business phone number, in
// messages per second: 80 by default, inbound and outbound messages of all
// types together. Meta raises a number to 1,000 messages per second
// automatically once it qualifies, and coexistence numbers are fixed at 20;
// the API never reports the current value, so configure it per key when it
// changes. Beyond it the API answers error code 130429.
//
// Source: https://developers.facebook.com/documentation/business-messaging/whatsapp/throughput
// ("Updated: May 21, 2026").
const DefaultRate = 80

const (
	channel = "whatsapp"

	// DefaultBaseURL is the Graph API host used when Config.BaseURL is empty.
	DefaultBaseURL = "https://graph.facebook.com"
	// DefaultTimeout is the timeout of the HTTP client made when Config.HTTPClient is nil.
	DefaultTimeout = 30 * time.Second

	maxDetail   = 200     // bytes of error.message kept in channels.Error.Detail
	maxBodySize = 1 << 20 // bytes of a response body read
)

// Config configures a [Client]. The zero value of every field but Token
// means its default.
type Config struct {
	// BaseURL is the scheme and host of the Graph API, optionally with a path
	// prefix; default [DefaultBaseURL]. Tests point it at a fake.
	BaseURL string
	// APIVersion is the Graph API version path segment, "vN.N"; default
	// [DefaultAPIVersion]. Meta keeps a version for about two years; New
	// refuses one it has retired (see [Retired]).
	APIVersion string
	// Token is the system-user access token, sent as "Authorization: Bearer".
	// Required. It never appears in an error.
	Token string
	// Pool sends the requests: HTTP/2 connections, or HTTP/1.1 keep-alive
	// ones to a host without HTTP/2 (see [Pool]); a request without a
	// context deadline ends after [DefaultTimeout]. Default a Pool of its
	// own with MaxIdleConnsPerHost connections; share one among the
	// clients of one channel (several tokens) so they share its
	// connections.
	Pool *Pool
	// MaxIdleConnsPerHost bounds the connections to the provider of the
	// default Pool, in use and idle; default
	// [channels.DefaultMaxIdleConnsPerHost]. Over HTTP/2 a connection
	// carries as many sends as the server allows streams (typically 100 or
	// more), so the bound matters only over HTTP/1.1, where it should be at
	// least the sends a process has in flight at once. Ignored when Pool
	// is set.
	MaxIdleConnsPerHost int
}

// Client is a [channels.Sender] for the WhatsApp Cloud API. It is safe for
// concurrent use.
type Client struct {
	base    *url.URL
	version string
	prefix  string // base joined with version, and "/"
	auth    string // "Bearer <token>"
	token   string
	hc      *http.Client // over the Pool
}

var _ channels.Sender = (*Client)(nil)

// New returns a Client for cfg. It returns an error naming the field if
// Config.Token is empty, Config.BaseURL is not an absolute http or https
// URL, or Config.APIVersion is not of the form vN.N or is a version Meta
// has retired by now ([Retired]). The error never contains the token.
func New(cfg Config) (*Client, error) {
	if cfg.Token == "" {
		return nil, errors.New("whatsapp: Config.Token is empty")
	}
	if cfg.BaseURL == "" {
		cfg.BaseURL = DefaultBaseURL
	}
	base, err := url.Parse(cfg.BaseURL)
	// The value and url.Parse's error (which quotes it) are left out: a
	// misplaced token could sit in it.
	if err != nil || (base.Scheme != "http" && base.Scheme != "https") || base.Host == "" {
		return nil, errors.New("whatsapp: Config.BaseURL is not an absolute http or https URL")
	}
	if cfg.APIVersion == "" {
		cfg.APIVersion = DefaultAPIVersion
	}
	if until, retired, err := Retired(cfg.APIVersion, time.Now()); err != nil {
		return nil, err
	} else if retired {
		when := "before v13.0"
		if !until.IsZero() {
			when = "on " + until.Format(time.DateOnly)
		}
		return nil, fmt.Errorf("whatsapp: Config.APIVersion %s was retired by Meta %s; use %s", cfg.APIVersion, when, DefaultAPIVersion)
	}
	if cfg.Pool == nil {
		cfg.Pool = NewPool(cfg.MaxIdleConnsPerHost, false)
	}
	return &Client{
		base:    base,
		version: cfg.APIVersion,
		prefix:  base.JoinPath(cfg.APIVersion).String() + "/",
		auth:    "Bearer " + cfg.Token,
		token:   cfg.Token,
		hc:      &http.Client{Transport: cfg.Pool, Timeout: DefaultTimeout},
	}, nil
}

// Send posts m to /{version}/{m.Key}/messages. The body is m.Payload (a JSON
// object, or empty) with messaging_product "whatsapp", recipient_type
// "individual" and to m.To set over it, and biz_opaque_callback_data
// [channels.CallbackData](m.ID, m.Campaign) added unless the payload sets it (Meta
// echoes it in status webhooks).
//
// On HTTP 2xx with messages[0].id, Send returns that wamid as
// Result.ProviderID: the message was accepted, not yet delivered. Otherwise
// it returns a *[channels.Error]:
//   - a payload that is not a JSON object: Permanent, Code "invalid-payload",
//     and no request is made; an empty m.Key, or "." or "..": Permanent,
//     Code "invalid-key";
//     a biz_opaque_callback_data that is not a string of at most
//     [MaxCallbackData] characters: Permanent, Code
//     [CodeCallbackDataTooLong], and no request is made;
//   - a Graph error body: classified by error.code through [codes]; an
//     unknown code by status (429 a Throttle of the key, 5xx Transient,
//     others Permanent);
//   - any other non-2xx body: by status (429 a Throttle of the key, 5xx
//     Transient, 401 and 403 Halt, others Permanent), with Err describing
//     the body;
//   - a 2xx body without messages[0].id: Transient, with Err;
//   - a transport failure: Transient, with Err.
//
// A Retry-After header (delta-seconds or HTTP-date) sets RetryAfter. Detail
// is error.message cut to 200 bytes, with the token and m.To removed. If ctx
// ends before a response, Send returns ctx.Err() itself.
func (c *Client) Send(ctx context.Context, m channels.Message) (channels.Result, error) {
	if m.Key == "" || m.Key == "." || m.Key == ".." {
		// A dot segment would leave the number's path: another endpoint.
		return channels.Result{}, &channels.Error{Channel: channel, Class: channels.Permanent,
			Code: "invalid-key", Detail: fmt.Sprintf("pacing key %q is not a phone-number ID", m.Key)}
	}
	body, err := requestBody(m)
	if errors.Is(err, errCallbackData) {
		return channels.Result{}, &channels.Error{Channel: channel, Class: channels.Permanent,
			Code: CodeCallbackDataTooLong, Detail: err.Error()}
	}
	if err != nil {
		return channels.Result{}, &channels.Error{Channel: channel, Class: channels.Permanent,
			Code: "invalid-payload", Detail: "payload is not a JSON object", Err: err}
	}
	return c.post(ctx, m, body)
}

// post posts body to m.Key's /messages endpoint and reads the answer as
// Send documents.
func (c *Client) post(ctx context.Context, m channels.Message, body []byte) (channels.Result, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, c.messagesURL(m.Key), bytes.NewReader(body))
	if err != nil {
		return channels.Result{}, &channels.Error{Channel: channel, Class: channels.Permanent,
			Code: "invalid-key", Detail: fmt.Sprintf("pacing key %q makes no valid URL", m.Key)}
	}
	req.Header = http.Header{
		"Authorization": {c.auth},
		"Content-Type":  {"application/json"},
		"Accept":        {"application/json"},
	}
	resp, err := channels.Do(c.hc, req)
	if err != nil {
		// ctx ended (its deadline may pass a moment before ctx says so);
		// DefaultTimeout passing without one is a transport failure.
		if _, has := ctx.Deadline(); ctx.Err() != nil || has && errors.Is(err, context.DeadlineExceeded) {
			return channels.Result{}, ctx.Err()
		}
		// A *url.Error: the URL (host, version, phone-number ID) and the
		// transport's error, never a header.
		return channels.Result{}, &channels.Error{Channel: channel, Class: channels.Transient,
			Err: fmt.Errorf("whatsapp: %w", err)}
	}
	raw, err := channels.ReadBody(resp.Body, maxBodySize)
	if err != nil {
		if ctx.Err() != nil {
			return channels.Result{}, ctx.Err()
		}
		return channels.Result{}, &channels.Error{Channel: channel, Status: resp.StatusCode, Class: channels.Transient,
			Err: fmt.Errorf("whatsapp: read the answer of POST %s: %w", c.messagesURL(m.Key), err)}
	}
	if resp.StatusCode >= 200 && resp.StatusCode < 300 {
		return c.success(resp.StatusCode, raw)
	}
	return channels.Result{}, c.failure(resp.StatusCode, resp.Header.Get("Retry-After"), raw, m.To, time.Now())
}

// messagesURL returns the URL of key's /messages endpoint:
// base/version/key/messages with key path-escaped. A key of letters,
// digits, '-' and '_' (a phone-number ID is digits) is appended to the
// prefix as it is; any other goes through url.JoinPath.
func (c *Client) messagesURL(key string) string {
	for i := 0; i < len(key); i++ {
		b := key[i]
		if !('0' <= b && b <= '9' || 'a' <= b && b <= 'z' || 'A' <= b && b <= 'Z' || b == '-' || b == '_') {
			return c.base.JoinPath(c.version, url.PathEscape(key), "messages").String()
		}
	}
	return c.prefix + key + "/messages"
}

// requestBody returns m.Payload with our fields merged in. Payload field
// values are kept byte for byte.
//
// The payload's fields are copied in their order after ours, without a map
// or reflection (one request per message: this was a twentieth of the
// pacer's CPU per message); a payload that the copy does not take as it
// is (a syntax error, invalid UTF-8 in a name) goes the general way, which
// gives the same body and the same errors as before.
func requestBody(m channels.Message) ([]byte, error) {
	if b, ok := appendRequestBody(make([]byte, 0, 128+len(m.Payload)), m); ok {
		return b, nil
	}
	return requestBodyMap(m)
}

// payloadDecoders keeps the decoders appendRequestBody reads payloads
// with (one per request otherwise, with its buffers).
var payloadDecoders = sync.Pool{New: func() any {
	pd := &payloadDecoder{}
	pd.d = jsontext.NewDecoder(&pd.r)
	return pd
}}

type payloadDecoder struct {
	r bytes.Reader
	d *jsontext.Decoder
}

// appendRequestBody is requestBody's common way: it appends to dst the
// body of m, or reports false when requestBodyMap must decide.
func appendRequestBody(dst []byte, m channels.Message) ([]byte, bool) {
	type field struct {
		name string
		val  []byte // compact JSON
	}
	var fields []field
	var own []byte // the payload's biz_opaque_callback_data
	p := bytes.TrimSpace(m.Payload)
	if len(p) > 0 && !bytes.Equal(p, []byte("null")) {
		if p[0] != '{' {
			return nil, false
		}
		pd := payloadDecoders.Get().(*payloadDecoder)
		defer payloadDecoders.Put(pd)
		pd.r.Reset(p)
		dec := pd.d
		dec.Reset(&pd.r, jsontext.AllowDuplicateNames(true))
		if t, err := dec.ReadToken(); err != nil || t.Kind() != '{' {
			return nil, false
		}
		for dec.PeekKind() == '"' {
			t, err := dec.ReadToken()
			if err != nil {
				return nil, false
			}
			name := t.String() // t is valid until the next read
			v, err := dec.ReadValue()
			if err != nil {
				return nil, false
			}
			end := int(dec.InputOffset())
			val := p[end-len(v) : end] // the payload's own bytes, not the decoder's buffer
			if bytes.ContainsAny(val, " \t\r\n") {
				c := jsontext.Value(bytes.Clone(val))
				if c.Compact() != nil {
					return nil, false
				}
				val = c
			}
			switch name {
			case "messaging_product", "recipient_type", "to":
				continue // ours win
			case "biz_opaque_callback_data":
				own = val
				continue
			}
			// A name given twice keeps its last value, as a map would.
			if i := slices.IndexFunc(fields, func(f field) bool { return f.name == name }); i >= 0 {
				fields = slices.Delete(fields, i, i+1)
			}
			fields = append(fields, field{name, val})
		}
		if t, err := dec.ReadToken(); err != nil || t.Kind() != '}' {
			return nil, false
		}
		if _, err := dec.ReadToken(); err != io.EOF {
			return nil, false // trailing data
		}
	}
	var err error
	dst = append(dst, `{"messaging_product":"whatsapp","recipient_type":"individual","to":`...)
	if dst, err = jsontext.AppendQuote(dst, m.To); err != nil {
		return nil, false
	}
	switch {
	case own != nil:
		var v string
		if json.Unmarshal(own, &v) != nil || utf8.RuneCountInString(v) > MaxCallbackData {
			return nil, false
		}
		dst = append(append(dst, `,"biz_opaque_callback_data":`...), own...)
	case m.ID != "":
		cb := channels.CallbackData(m.ID, m.Campaign)
		if utf8.RuneCountInString(cb) > MaxCallbackData {
			return nil, false
		}
		dst = append(dst, `,"biz_opaque_callback_data":`...)
		if dst, err = jsontext.AppendQuote(dst, cb); err != nil {
			return nil, false
		}
	}
	for _, f := range fields {
		dst = append(dst, ',')
		if dst, err = jsontext.AppendQuote(dst, f.name); err != nil {
			return nil, false
		}
		dst = append(append(dst, ':'), f.val...)
	}
	return append(dst, '}'), true
}

// requestBodyMap is requestBody through a map of the payload's fields.
func requestBodyMap(m channels.Message) ([]byte, error) {
	fields := map[string]json.RawMessage{}
	p := bytes.TrimSpace(m.Payload)
	if len(p) > 0 && !bytes.Equal(p, []byte("null")) {
		if p[0] != '{' {
			return nil, errors.New("whatsapp: payload is not a JSON object")
		}
		if err := json.Unmarshal(p, &fields); err != nil {
			return nil, fmt.Errorf("whatsapp: decode payload: %w", err)
		}
	}
	set := func(k, v string) {
		b, _ := json.Marshal(v) // a string always marshals
		fields[k] = b
	}
	set("messaging_product", "whatsapp")
	set("recipient_type", "individual")
	set("to", m.To)
	if _, ok := fields["biz_opaque_callback_data"]; !ok && m.ID != "" {
		set("biz_opaque_callback_data", channels.CallbackData(m.ID, m.Campaign))
	}
	if raw, ok := fields["biz_opaque_callback_data"]; ok {
		var v string
		if err := json.Unmarshal(raw, &v); err != nil {
			return nil, fmt.Errorf("%w: not a string", errCallbackData)
		}
		if n := utf8.RuneCountInString(v); n > MaxCallbackData {
			return nil, fmt.Errorf("%w: %d characters, at most %d", errCallbackData, n, MaxCallbackData)
		}
	}
	return json.Marshal(fields)
}

// MaxCallbackData is the longest biz_opaque_callback_data the Cloud API
// takes, in characters. Send puts the envelope id and campaign there
// ([channels.CallbackData] leaves a campaign out rather than exceed it), so only a
// payload that sets the field itself can exceed it.
//
// Source: https://developers.facebook.com/docs/whatsapp/cloud-api/reference/messages
// (biz_opaque_callback_data: "Maximum 512 characters").
const MaxCallbackData = channels.MaxCallbackLen

// CodeCallbackDataTooLong is the Code of the Permanent error Send returns,
// without a request, for a biz_opaque_callback_data that is not a string
// or longer than [MaxCallbackData] characters; the pacer dead-letters the
// message as "permanent:biz_opaque_callback_data".
const CodeCallbackDataTooLong = "biz_opaque_callback_data"

var errCallbackData = errors.New("whatsapp: biz_opaque_callback_data is invalid")

// success reads the wamid from a 2xx body.
func (c *Client) success(status int, raw []byte) (channels.Result, error) {
	var ok struct {
		Messages []struct {
			ID string `json:"id"`
		} `json:"messages"`
	}
	// As lenient as encoding/json (a success body that does not decode is
	// an unknown outcome's cousin: retried), at a third of its CPU.
	err := jsonv2.Unmarshal(raw, &ok, jsontext.AllowDuplicateNames(true), jsontext.AllowInvalidUTF8(true))
	if err == nil && len(ok.Messages) > 0 && ok.Messages[0].ID != "" {
		return channels.Result{ProviderID: ok.Messages[0].ID}, nil
	}
	if err == nil {
		err = errors.New("whatsapp: success body has no messages[0].id")
	} else {
		err = fmt.Errorf("whatsapp: decode success body: %w", err)
	}
	return channels.Result{}, &channels.Error{Channel: channel, Status: status, Class: channels.Transient, Err: err}
}

// graphError is the Graph API error body:
//
//	{"error":{"message":"(#130429) Rate limit hit","type":"OAuthException","code":130429,
//	  "error_data":{"messaging_product":"whatsapp","details":"..."},"fbtrace_id":"..."}}
type graphError struct {
	Error *struct {
		Message   string          `json:"message"`
		Code      json.Number     `json:"code"`
		ErrorData json.RawMessage `json:"error_data"` // an object on /messages, a string elsewhere in Graph
		FBTraceID string          `json:"fbtrace_id"`
	} `json:"error"`
}

// AccountCooldown is the RetryAfter of an account- or app-scoped throttle
// (80007, 4) that names no Retry-After. Both limits are request budgets
// over a rolling hour (200 or 5,000 requests per hour per WABA and app;
// providers.md §1.4, [W-AP] [W-EC]): a cooldown of one minute lets a
// sixtieth of the hour roll out of the window (about 83 requests of a
// 5,000/h budget) before the account is tried again, where 1 s would meet
// the exhausted budget again at once.
const AccountCooldown = time.Minute

// failure builds the *channels.Error for a non-2xx response.
func (c *Client) failure(status int, retryAfter string, raw []byte, to string, now time.Time) *channels.Error {
	e := &channels.Error{
		Channel:    channel,
		Status:     status,
		RetryAfter: channels.ParseRetryAfter(retryAfter, now),
	}
	var g graphError
	if err := json.Unmarshal(raw, &g); err != nil || g.Error == nil || g.Error.Code == "" {
		if err == nil {
			err = errors.New("no error.code in body")
		}
		e.Class = statusClass(status, true)
		e.Err = fmt.Errorf("whatsapp: HTTP %d without a Graph error body: %w", status, err)
		return e
	}
	e.Code = g.Error.Code.String()
	e.Trace = traceID(g.Error.FBTraceID)
	detail := g.Error.Message
	if detail == "" {
		var d struct {
			Details string `json:"details"`
		}
		if json.Unmarshal(g.Error.ErrorData, &d) == nil {
			detail = d.Details
		}
	}
	e.Detail = c.redact(detail, to)
	code, err := strconv.Atoi(e.Code)
	if r, ok := classify(code); err == nil && ok {
		e.Class, e.Scope = r.class, r.scope
		if e.Scope == channels.ScopeAccount && e.RetryAfter <= 0 {
			e.RetryAfter = AccountCooldown
		}
		e.RetryAfter = max(e.RetryAfter, cooldowns[code])
	} else {
		e.Class = statusClass(status, false)
	}
	return e
}

// traceID returns id if it looks like an fbtrace_id (at most 64 letters,
// digits, '_' and '-'), else "": it is logged and written to the DLQ, so a
// body never puts anything else there.
func traceID(id string) string {
	if len(id) > 64 {
		return ""
	}
	for _, c := range id {
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '_' || c == '-') {
			return ""
		}
	}
	return id
}

// statusClass classifies a response by its HTTP status alone: 429 is a
// Throttle (of the key: the scope [channels.Error] has by default), 5xx
// Transient, others Permanent. A 429 says "too many requests" whatever
// code or body comes with it: retried as a transient failure, it would
// come back at the same rate. Without a Graph body, 401 and 403 are Halt:
// a proxy or gateway refused our credentials, and dead-lettering every
// message would lose them.
func statusClass(status int, noBody bool) channels.Class {
	switch {
	case status == http.StatusTooManyRequests:
		return channels.Throttle
	case status >= 500:
		return channels.Transient
	case noBody && (status == http.StatusUnauthorized || status == http.StatusForbidden):
		return channels.Halt
	default:
		return channels.Permanent
	}
}

// redact removes the token and the recipient from s, then cuts it to
// maxDetail bytes on a rune boundary. The recipient is replaced only where
// it stands alone (not inside a longer number), so an error code such as
// "(#1300)" survives a recipient "10".
func (c *Client) redact(s, to string) string {
	s = strings.ReplaceAll(s, c.token, "[token]")
	if to != "" {
		s = channels.ReplaceNumber(s, to, "[recipient]")
		if d := strings.TrimPrefix(to, "+"); d != to && d != "" {
			s = channels.ReplaceNumber(s, d, "[recipient]")
		}
	}
	return channels.Cut(s, maxDetail)
}
