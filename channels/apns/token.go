package apns

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"sync"
	"time"

	"github.com/golang-jwt/jwt/v5"
)

// MinTokenTTL and MaxTokenTTL bound Config.TokenTTL: APNs wants the
// provider token refreshed no more than once every 20 minutes (more often
// gets 429 TooManyProviderTokenUpdates) and no less than once every 60
// (older gets 403 ExpiredProviderToken). [A-TK]
const (
	MinTokenTTL     = 20 * time.Minute
	MaxTokenTTL     = 60 * time.Minute
	DefaultTokenTTL = 40 * time.Minute
)

// tokenSource mints the ES256 provider token and shares it with every send
// of the process. A new token is minted only when the current one is
// TokenTTL old, or once early after APNs called it expired, and never
// within [MinTokenTTL] of the previous one.
//
// Age is measured on the wall clock (Config.Now, monotonic reading
// stripped), the clock iat is written with: APNs judges iat against its
// own wall clock, and a monotonic clock stops while a machine sleeps.
type tokenSource struct {
	keyID, teamID string
	key           *ecdsa.PrivateKey
	ttl           time.Duration
	now           func() time.Time

	mu     sync.Mutex
	bearer string    // "bearer <jwt>"; "" before the first mint
	iat    time.Time // the token's iat, whole seconds
	mints  int       // tokens minted so far
}

// get returns the current bearer value, minting a token if there is none or
// it is ttl old.
func (ts *tokenSource) get() (string, error) {
	ts.mu.Lock()
	defer ts.mu.Unlock()
	now := ts.now().Round(0)
	if ts.bearer == "" || now.Sub(ts.iat) >= ts.ttl {
		if err := ts.mint(now); err != nil {
			return "", err
		}
	}
	return ts.bearer, nil
}

// renew is called after APNs answered ExpiredProviderToken to a request
// made with stale. It returns the bearer value to retry with, and false if
// there is none: a token newer than stale exists already (another send
// renewed it) and is returned; otherwise one is minted, but only if stale
// is at least [MinTokenTTL] old. A younger token that APNs calls expired
// means our clock is wrong, which a new token would not fix, and rotating
// it would risk 429 TooManyProviderTokenUpdates on top.
func (ts *tokenSource) renew(stale string) (string, bool) {
	ts.mu.Lock()
	defer ts.mu.Unlock()
	if ts.bearer != stale {
		return ts.bearer, ts.bearer != ""
	}
	now := ts.now().Round(0)
	if now.Sub(ts.iat) < MinTokenTTL {
		return "", false
	}
	if ts.mint(now) != nil {
		return "", false
	}
	return ts.bearer, true
}

// mint signs a new token with iat now. ts.mu is held.
func (ts *tokenSource) mint(now time.Time) error {
	iat := now.Unix()
	t := jwt.NewWithClaims(jwt.SigningMethodES256, jwt.MapClaims{"iss": ts.teamID, "iat": iat})
	t.Header = map[string]any{"alg": jwt.SigningMethodES256.Alg(), "kid": ts.keyID} // Apple's header: no "typ"
	s, err := t.SignedString(ts.key)
	if err != nil {
		// jwt's errors name the cause, never the key.
		return errors.New("apns: sign provider token: " + err.Error())
	}
	ts.bearer, ts.iat = "bearer "+s, time.Unix(iat, 0)
	ts.mints++
	return nil
}

// parseKey reads a .p8 file: a PEM "PRIVATE KEY" block holding a PKCS#8 EC
// P-256 key (a SEC1 "EC PRIVATE KEY" block is accepted too). Its errors
// never quote the input or a parser's message, which could.
func parseKey(p8 []byte) (*ecdsa.PrivateKey, error) {
	if len(p8) == 0 {
		return nil, errors.New("apns: Config.PrivateKey is empty")
	}
	block, _ := pem.Decode(p8)
	if block == nil {
		return nil, errors.New("apns: Config.PrivateKey is not PEM-encoded (want the contents of the .p8 file)")
	}
	var key any
	var err error
	switch block.Type {
	case "PRIVATE KEY":
		key, err = x509.ParsePKCS8PrivateKey(block.Bytes)
	case "EC PRIVATE KEY":
		key, err = x509.ParseECPrivateKey(block.Bytes)
	default:
		return nil, errors.New("apns: Config.PrivateKey is not a PEM PRIVATE KEY block")
	}
	if err != nil {
		return nil, errors.New("apns: Config.PrivateKey is not a valid PKCS#8 private key")
	}
	ec, ok := key.(*ecdsa.PrivateKey)
	if !ok {
		return nil, errors.New("apns: Config.PrivateKey is not an EC key (APNs supports only ES256)")
	}
	if ec.Curve != elliptic.P256() {
		return nil, errors.New("apns: Config.PrivateKey is not on curve P-256 (APNs supports only ES256)")
	}
	return ec, nil
}
