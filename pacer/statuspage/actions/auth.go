package actions

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"os"
	"regexp"
	"strings"
)

// Credential is one entry of a credentials file:
//
//	[{"name": "alice", "token_sha256": "<64 hex digits: SHA-256 of her token>"}]
//
// The file holds only the token's SHA-256 (`printf %s "$TOKEN" |
// sha256sum`), never a token, as the ingest tenants file holds its API
// keys'. Name is who acted in the log of every action. Nothing tells a
// SHA-256 from a token of 64 hex digits when a file is read: a token
// written as is (or hashed with echo's newline) is found only when it is
// used, and refused saying so.
type Credential struct {
	// Name is 1 to 64 of [A-Za-z0-9._@-].
	Name string `json:"name"`
	// TokenSHA256 is the hex SHA-256 of the bearer token.
	TokenSHA256 string `json:"token_sha256"`
}

// Role is what a credential allows.
type Role int

const (
	None     Role = iota // no credential: the page's static HTML and whoami only (and the data, when reading is open)
	Viewer               // reads /status.json
	Operator             // reads, and acts
)

func (r Role) String() string {
	switch r {
	case Viewer:
		return "viewer"
	case Operator:
		return "operator"
	}
	return "none"
}

var credentialName = regexp.MustCompile(`^[A-Za-z0-9._@-]{1,64}$`)

// ParseCredentials parses and validates a credentials file (JSON, a list
// of [Credential]). Errors name the file, the entry (by position and
// name) and the field, never a digest.
func ParseCredentials(file string, b []byte) ([]Credential, error) {
	var cs []Credential
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&cs); err != nil {
		return nil, fmt.Errorf(`%s: not the JSON list [{"name": ..., "token_sha256": ...}] expected: %w`, file, err)
	}
	var errs []error
	names := map[string]bool{}
	for i, c := range cs {
		bad := func(field, problem string) {
			errs = append(errs, fmt.Errorf("%s: entry %d (%q): %s %s", file, i+1, c.Name, field, problem))
		}
		if !credentialName.MatchString(c.Name) {
			bad("name", "must be 1 to 64 of A-Z a-z 0-9 . _ @ -")
		}
		if names[c.Name] {
			bad("name", "is given to more than one entry")
		}
		names[c.Name] = true
		if d, err := hex.DecodeString(c.TokenSHA256); err != nil || len(d) != sha256.Size {
			bad("token_sha256", "must be 64 hex digits (the SHA-256 of the token, not the token)")
		}
	}
	if len(errs) > 0 {
		return nil, errors.Join(errs...)
	}
	return cs, nil
}

// LoadCredentials reads and parses the credentials file at path.
func LoadCredentials(path string) ([]Credential, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	return ParseCredentials(path, b)
}

// Auth tells who a request comes from by its bearer token. It is safe for
// concurrent use; it does not change after [NewAuth].
type Auth struct {
	byDigest map[[sha256.Size]byte]who
	// openRead lets a request without a credential read /status.json.
	openRead  bool
	operators int
	viewers   int
}

type who struct {
	name string
	role Role
}

// NewAuth returns the Auth of viewers and operators (an operator reads
// too). openRead lets a request without any credential read the page's
// data; a wrong token is refused all the same. With no operators, no
// request may act ([Auth.Actions] is false). A token given to two
// entries is an error naming both.
func NewAuth(viewers, operators []Credential, openRead bool) (*Auth, error) {
	a := &Auth{byDigest: map[[sha256.Size]byte]who{}, openRead: openRead, operators: len(operators), viewers: len(viewers)}
	var errs []error
	add := func(cs []Credential, role Role) {
		for _, c := range cs {
			d, err := hex.DecodeString(c.TokenSHA256)
			if err != nil || len(d) != sha256.Size {
				errs = append(errs, fmt.Errorf("%s %q: token_sha256 must be 64 hex digits", role, c.Name))
				continue
			}
			k := [sha256.Size]byte(d)
			if prev, ok := a.byDigest[k]; ok {
				errs = append(errs, fmt.Errorf("%s %q has the token of %s %q: give each its own", role, c.Name, prev.role, prev.name))
				continue
			}
			a.byDigest[k] = who{c.Name, role}
		}
	}
	add(operators, Operator)
	add(viewers, Viewer)
	if len(errs) > 0 {
		return nil, errors.Join(errs...)
	}
	return a, nil
}

// Actions reports whether any request may act: whether operators are
// configured.
func (a *Auth) Actions() bool { return a.operators > 0 }

// OpenRead reports whether a request without a credential may read the
// page's data.
func (a *Auth) OpenRead() bool { return a.openRead }

// Describe says, for the start-up log, who may read and who may act.
func (a *Auth) Describe() (reading, acting string) {
	switch {
	case a.openRead:
		reading = "open: no credential needed"
	case a.viewers+a.operators == 0:
		reading = "closed: no credential is configured, every reading is refused"
	default:
		reading = fmt.Sprintf("%d viewer(s) and %d operator(s)", a.viewers, a.operators)
	}
	acting = "off: no operator is configured"
	if a.operators > 0 {
		acting = fmt.Sprintf("%d operator(s)", a.operators)
	}
	return reading, acting
}

// errNoToken, errBadToken and the others are why a request has no role.
// errTokenInFile and errNewlineDigest are a known token written wrongly
// in a credentials file: they are still refused, with the fix.
var (
	errNoToken       = errors.New("no credential: send Authorization: Bearer <token>")
	errBadToken      = errors.New("the bearer token is not one this page knows")
	errTokenInFile   = errors.New(`the bearer token is not one this page knows: a credentials file holds this token itself as token_sha256, not its SHA-256; write the output of printf %s "$TOKEN" | sha256sum there instead`)
	errNewlineDigest = errors.New(`the bearer token is not one this page knows: a credentials file holds the SHA-256 of this token followed by a newline (echo adds one); write the output of printf %s "$TOKEN" | sha256sum there instead`)
)

// identify returns who sent r: the credential's name and role, None and
// errNoToken without an Authorization header, errBadToken for a token (or
// a header) it does not know, errTokenInFile or errNewlineDigest for a
// token a credentials file holds wrongly. Only the token's SHA-256 (and,
// to find such a file, the token itself) is compared.
func (a *Auth) identify(r *http.Request) (name string, role Role, err error) {
	h := r.Header.Get("Authorization")
	if h == "" {
		return "", None, errNoToken
	}
	scheme, tok, ok := strings.Cut(h, " ")
	if !ok || !strings.EqualFold(scheme, "Bearer") || strings.TrimSpace(tok) == "" {
		return "", None, errBadToken
	}
	tok = strings.TrimSpace(tok)
	w, ok := a.byDigest[sha256.Sum256([]byte(tok))]
	if !ok {
		// Nothing tells a digest from a token of 64 hex digits when a
		// file is read: a token written as is, or hashed with echo's
		// newline, shows only when it is used.
		if d, err := hex.DecodeString(tok); err == nil && len(d) == sha256.Size {
			if _, ok := a.byDigest[[sha256.Size]byte(d)]; ok {
				return "", None, errTokenInFile
			}
		}
		if _, ok := a.byDigest[sha256.Sum256([]byte(tok+"\n"))]; ok {
			return "", None, errNewlineDigest
		}
		return "", None, errBadToken
	}
	return w.name, w.role, nil
}
