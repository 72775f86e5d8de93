package ingest

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/url"
	"os"
	"regexp"
	"strings"
	"sync/atomic"
	"time"

	"github.com/pacerhq/pacer/internal/logrepeat"
	"github.com/pacerhq/pacer/internal/tick"
)

// Tenant is one tenant of the tenants file (PACER_INGEST_TENANTS):
//
//	{"tenants": [
//	  {"id": "acme",
//	   "key_sha256": ["<64 hex digits: SHA-256 of an API key>", "..."],
//	   "requests_per_second": 50, "burst": 100,
//	   "messages_per_day": 1000000,
//	   "channels": ["whatsapp", "sendgrid"]}
//	]}
//
// A tenant may have several keys (rotation); the file holds only their
// SHA-256 (`printf %s "$KEY" | sha256sum`), never a key.
type Tenant struct {
	// ID names the tenant; it is written into every envelope it sends.
	// 1 to 64 of [A-Za-z0-9._-].
	ID string `json:"id"`
	// KeySHA256 are the hex SHA-256 digests of the tenant's API keys.
	KeySHA256 []string `json:"key_sha256"`
	// RequestsPerSecond is the tenant's request rate (token bucket), > 0.
	RequestsPerSecond float64 `json:"requests_per_second"`
	// Burst is the tenant's bucket capacity in requests; default
	// max(1, ceil(RequestsPerSecond)).
	Burst int `json:"burst"`
	// MessagesPerDay is the tenant's sliding-window quota of messages per
	// 24 h, >= 1.
	MessagesPerDay int `json:"messages_per_day"`
	// Channels the tenant may publish to.
	Channels []string `json:"channels"`
	// CallbackURL, when set, receives the outcomes of the tenant's
	// messages: signed batches POSTed by the callback dispatcher
	// (docs/webhooks.md#tenant-callbacks). An absolute http or https URL.
	CallbackURL string `json:"callback_url,omitempty"`
	// CallbackSecretFile is the path of the file holding the callbacks'
	// signing secrets (whsec_<base64>, whitespace-separated: each signs,
	// for rotation); required with CallbackURL. The file is read by the
	// dispatcher; the tenants file never holds a secret.
	CallbackSecretFile string `json:"callback_secret_file,omitempty"`
}

// Tenants is a loaded tenants file: every tenant by the SHA-256 of each of
// its API keys.
type Tenants struct {
	byKey   map[[sha256.Size]byte]*Tenant
	count   int
	byID    map[string]*Tenant
	ordered []*Tenant // in file order
}

var tenantID = regexp.MustCompile(`^[A-Za-z0-9._-]{1,64}$`)

// ParseTenants parses and validates a tenants file. channels are the
// channels the gateway serves; a tenant naming another is an error. Errors
// name the tenant (by position and id) and the field, never a key digest.
func ParseTenants(b []byte, channels []string) (*Tenants, error) {
	var f struct {
		Tenants []Tenant `json:"tenants"`
	}
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&f); err != nil {
		return nil, fmt.Errorf(`tenants file: not the JSON object {"tenants":[...]} expected (YAML is not read): %w`, err)
	}
	ts := &Tenants{byKey: map[[sha256.Size]byte]*Tenant{}}
	ids := map[string]bool{}
	var errs []error
	for i := range f.Tenants {
		t := &f.Tenants[i]
		bad := func(field, problem string) {
			errs = append(errs, fmt.Errorf("tenants file: tenant %d (%q): %s: %s", i+1, t.ID, field, problem))
		}
		if !tenantID.MatchString(t.ID) {
			bad("id", "must be 1 to 64 of A-Z a-z 0-9 . _ -")
		}
		if ids[t.ID] {
			bad("id", "given to more than one tenant")
		}
		ids[t.ID] = true
		if len(t.KeySHA256) == 0 {
			bad("key_sha256", "at least one key digest is required")
		}
		for j, h := range t.KeySHA256 {
			d, err := hex.DecodeString(strings.ToLower(h))
			if err != nil || len(d) != sha256.Size {
				bad("key_sha256", fmt.Sprintf("entry %d is not 64 hex digits", j+1))
				continue
			}
			k := [sha256.Size]byte(d)
			if ts.byKey[k] != nil {
				bad("key_sha256", fmt.Sprintf("entry %d is a key of another tenant too", j+1))
			}
			ts.byKey[k] = t
		}
		if !(t.RequestsPerSecond > 0 && t.RequestsPerSecond <= 1e6) {
			bad("requests_per_second", "must be > 0 and <= 1e6")
		}
		if t.Burst == 0 {
			t.Burst = max(1, int(t.RequestsPerSecond+0.999999))
		}
		if t.Burst < 1 || t.Burst > 1e9 {
			bad("burst", "must be >= 1 (0 or absent: the rate rounded up)")
		}
		if t.MessagesPerDay < 1 || t.MessagesPerDay > 1e9 {
			bad("messages_per_day", "must be in 1..1e9")
		}
		if len(t.Channels) == 0 {
			bad("channels", "at least one channel is required")
		}
		switch u, err := url.Parse(t.CallbackURL); {
		case t.CallbackURL == "":
			if t.CallbackSecretFile != "" {
				bad("callback_secret_file", "given without callback_url")
			}
		case err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "":
			bad("callback_url", "must be an absolute http or https URL")
		case t.CallbackSecretFile == "":
			bad("callback_secret_file", "required with callback_url: the path of the file holding the signing secrets")
		}
		for _, c := range t.Channels {
			known := false
			for _, s := range channels {
				known = known || s == c
			}
			if !known {
				bad("channels", fmt.Sprintf("%q is not a channel this gateway serves (%s)", c, strings.Join(channels, ", ")))
			}
		}
	}
	if len(errs) > 0 {
		return nil, errors.Join(errs...)
	}
	ts.count = len(f.Tenants)
	ts.byID = map[string]*Tenant{}
	for i := range f.Tenants {
		ts.byID[f.Tenants[i].ID] = &f.Tenants[i]
		ts.ordered = append(ts.ordered, &f.Tenants[i])
	}
	return ts, nil
}

// ByID returns the tenant whose id is id, or nil.
func (ts *Tenants) ByID(id string) *Tenant {
	if ts == nil {
		return nil
	}
	return ts.byID[id]
}

// Lookup returns the tenant whose API key is key, or nil. Only the key's
// SHA-256 is compared, so the key itself is never kept.
func (ts *Tenants) Lookup(key string) *Tenant {
	if ts == nil || key == "" {
		return nil
	}
	return ts.byKey[sha256.Sum256([]byte(key))]
}

// Len returns the number of tenants.
func (ts *Tenants) Len() int { return ts.count }

// Allowed reports whether t may publish to channel.
func (t *Tenant) Allowed(channel string) bool {
	for _, c := range t.Channels {
		if c == channel {
			return true
		}
	}
	return false
}

// TenantFile is the tenants file, reloaded when it changes. Safe for
// concurrent use.
type TenantFile struct {
	path     string
	channels []string
	secrets  func(path string) error // checks a callback_secret_file; nil: not checked
	cur      atomic.Pointer[Tenants]
	stamp    string // SHA-256 of the file last read; Watch's goroutine only
	readLog  logrepeat.Gate
}

// readError is a tenants file that cannot be read (missing, unreadable):
// it fails every poll until fixed, so Watch logs it once a minute.
type readError struct{ err error }

func (e *readError) Error() string { return "tenants file: " + e.err.Error() }
func (e *readError) Unwrap() error { return e.err }

// LoadTenantFile reads and validates the tenants file at path.
func LoadTenantFile(path string, channels []string) (*TenantFile, error) {
	return LoadTenantFileChecked(path, channels, nil)
}

// LoadTenantFileChecked is [LoadTenantFile] that, at the first load and
// every reload, also runs secrets on each tenant's callback_secret_file
// (pacer ingest passes callback.ReadSecrets: the file must exist and hold
// whsec_ secrets). Its error, which must name the file but never a
// secret, fails the load, naming the tenant and the field. A file that
// fails the check on reload is retried at every poll (it may be fixed
// without the tenants file changing) and logged as an unreadable tenants
// file is: the tenants before stay in force.
func LoadTenantFileChecked(path string, channels []string, secrets func(path string) error) (*TenantFile, error) {
	tf := &TenantFile{path: path, channels: channels, secrets: secrets}
	if _, err := tf.reload(); err != nil {
		return nil, err
	}
	return tf, nil
}

// checkSecrets runs tf.secrets on every callback_secret_file of ts.
func (tf *TenantFile) checkSecrets(ts *Tenants) error {
	if tf.secrets == nil {
		return nil
	}
	var errs []error
	for _, t := range ts.ordered {
		if t.CallbackSecretFile == "" {
			continue
		}
		if err := tf.secrets(t.CallbackSecretFile); err != nil {
			errs = append(errs, fmt.Errorf("tenant %q: callback_secret_file: %w", t.ID, err))
		}
	}
	return errors.Join(errs...)
}

// Tenants returns the tenants last loaded.
func (tf *TenantFile) Tenants() *Tenants { return tf.cur.Load() }

// reload loads the file if its content changed since the last load; it
// reports whether it did. A file that fails validation is not loaded: the
// tenants before stay in force.
func (tf *TenantFile) reload() (bool, error) {
	b, err := os.ReadFile(tf.path)
	if err != nil {
		return false, &readError{err}
	}
	sum := sha256.Sum256(b)
	st := string(sum[:])
	if st == tf.stamp {
		return false, nil
	}
	tf.stamp = st // a bad file is reported once, not every poll
	ts, err := ParseTenants(b, tf.channels)
	if err != nil {
		return false, err
	}
	if err := tf.checkSecrets(ts); err != nil {
		tf.stamp = "" // checked again at the next poll
		return false, &readError{err}
	}
	tf.cur.Store(ts)
	return true, nil
}

// Watch reads the file every interval until ctx ends and loads it when its
// content changed (a write in place or an editor's rename alike; a file's
// mtime may not move within one clock tick, its content hash does).
// A bad file is logged (once per content) and the tenants before stay in
// force; a file that cannot be read is logged at once, then at most once a
// minute while it lasts, and once more ("tenants file readable again")
// when it can be read again.
func (tf *TenantFile) Watch(ctx context.Context, interval time.Duration, log *slog.Logger) {
	tick.Every(ctx, interval, func(time.Time) {
		ok, err := tf.reload()
		var re *readError
		if errors.As(err, &re) {
			if show, skipped := tf.readLog.Fail(); show {
				log.Error("tenants file not reloaded; the tenants before stay in force (logged at most once a minute while it lasts)",
					"err", err, "unlogged_failures", skipped)
			}
			return
		}
		if rec, failures, lasted := tf.readLog.OK(); rec {
			log.Info("tenants file readable again", "failures", failures, "after", lasted.Round(time.Millisecond))
		}
		switch {
		case err != nil:
			log.Error("tenants file not reloaded; the tenants before stay in force", "err", err)
		case ok:
			log.Info("tenants file reloaded", "tenants", tf.Tenants().Len())
		}
	})
}
