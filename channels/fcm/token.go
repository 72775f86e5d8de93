package fcm

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"sync/atomic"
	"time"

	"golang.org/x/oauth2"
	"golang.org/x/oauth2/google"

	"github.com/pacerhq/pacer/channels"
)

// tokenMargin is how long before its expiry a cached access token is
// replaced: longer than the default 30 s request timeout, so a token never
// expires while a request carrying it is in flight. Google access tokens
// last about an hour.
const tokenMargin = time.Minute

// tokens caches the OAuth2 access token of a Client. The fast path is one
// atomic load; a refresh runs under a one-slot semaphore, so concurrent
// senders wait for one token request (each waiter can give up when its ctx
// ends) instead of sending their own.
type tokens struct {
	fetch func(ctx context.Context) (*oauth2.Token, error)
	cur   atomic.Pointer[oauth2.Token]
	sem   chan struct{}
}

func newTokens(fetch func(ctx context.Context) (*oauth2.Token, error)) *tokens {
	return &tokens{fetch: fetch, sem: make(chan struct{}, 1)}
}

// fresh reports whether t can be sent at now.
func fresh(t *oauth2.Token, now time.Time) bool {
	return t != nil && t.AccessToken != "" && (t.Expiry.IsZero() || now.Add(tokenMargin).Before(t.Expiry))
}

// get returns a token that is valid for at least [tokenMargin], fetching one
// if the cached one is not. It returns ctx.Err() if ctx ends first.
func (ts *tokens) get(ctx context.Context) (*oauth2.Token, error) {
	if t := ts.cur.Load(); fresh(t, time.Now()) {
		return t, nil
	}
	select {
	case ts.sem <- struct{}{}:
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	defer func() { <-ts.sem }()
	if t := ts.cur.Load(); fresh(t, time.Now()) { // another sender refreshed it
		return t, nil
	}
	t, err := ts.fetch(ctx)
	if err != nil {
		return nil, err
	}
	if t == nil || t.AccessToken == "" {
		return nil, errors.New("token source returned an empty access token")
	}
	ts.cur.Store(t)
	return t, nil
}

// invalidate drops the cached token if it is still access, so the next get
// fetches a new one. A token already replaced by another sender is kept.
func (ts *tokens) invalidate(access string) {
	if t := ts.cur.Load(); t != nil && t.AccessToken == access {
		ts.cur.CompareAndSwap(t, nil)
	}
}

// serviceAccount is the part of a service-account JSON key that New checks.
type serviceAccount struct {
	Type        string `json:"type"`
	ClientEmail string `json:"client_email"`
	PrivateKey  string `json:"private_key"`
	TokenURI    string `json:"token_uri"`
}

// jsonFetch returns a fetch function that mints a token from a
// service-account JSON key through the JWT-bearer grant of
// golang.org/x/oauth2/google, at the key's token_uri. Each call builds the
// credentials anew (once an hour at most, thanks to [tokens]) so that the
// token request runs under the caller's ctx, not New's.
//
// The JWT flow posts with http.Client.PostForm, which carries no ctx, so
// the client handed to it puts ctx on every request itself: a Send whose
// ctx ends stops waiting for the token endpoint.
func jsonFetch(key []byte, hc *http.Client) func(ctx context.Context) (*oauth2.Token, error) {
	return func(ctx context.Context) (*oauth2.Token, error) {
		base := hc.Transport
		if base == nil {
			base = http.DefaultTransport
		}
		tc := *hc
		tc.Transport = ctxTransport{ctx: ctx, base: base}
		ctx = context.WithValue(ctx, oauth2.HTTPClient, &tc)
		creds, err := google.CredentialsFromJSONWithType(ctx, key, google.ServiceAccount, Scope)
		if err != nil {
			return nil, err
		}
		return creds.TokenSource.Token()
	}
}

// ctxTransport sends every request under ctx.
type ctxTransport struct {
	ctx  context.Context
	base http.RoundTripper
}

func (t ctxTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	return t.base.RoundTrip(r.WithContext(t.ctx))
}

// sourceFetch adapts a caller's oauth2.TokenSource. Its Token method takes
// no ctx, so a token request it makes cannot be cancelled.
func sourceFetch(src oauth2.TokenSource) func(ctx context.Context) (*oauth2.Token, error) {
	return func(ctx context.Context) (*oauth2.Token, error) {
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		return src.Token()
	}
}

// redactedError carries a token-source error whose text may hold secrets:
// Error returns a description built without them, Unwrap the original for
// errors.Is and errors.As.
type redactedError struct {
	msg string
	err error
}

func (e *redactedError) Error() string { return e.msg }
func (e *redactedError) Unwrap() error { return e.err }

// describeTokenError says why a token could not be had, without the body
// of a token-endpoint answer (a proxy or fake might echo the signed
// assertion) and with every string of secrets removed.
func describeTokenError(err error, secrets []string) string {
	var re *oauth2.RetrieveError
	if !errors.As(err, &re) {
		return redact(err.Error(), secrets)
	}
	msg := "token endpoint refused the request"
	if re.Response != nil {
		msg = fmt.Sprintf("token endpoint answered HTTP %d", re.Response.StatusCode)
	}
	code, desc := re.ErrorCode, re.ErrorDescription
	if code == "" { // the JWT flow leaves the body unparsed
		var b struct {
			Error            string `json:"error"`
			ErrorDescription string `json:"error_description"`
		}
		if json.Unmarshal(re.Body, &b) == nil {
			code, desc = b.Error, b.ErrorDescription
		}
	}
	if code != "" {
		msg += " " + code
		if desc != "" {
			msg += ": " + desc
		}
	}
	return redact(msg, secrets)
}

// redact replaces every non-empty secret in s with "[redacted]" and cuts
// the result to maxDetail bytes.
func redact(s string, secrets []string) string {
	for _, x := range secrets {
		if x != "" {
			s = strings.ReplaceAll(s, x, "[redacted]")
		}
	}
	return channels.Cut(s, maxDetail)
}
