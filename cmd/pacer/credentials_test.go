package main

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/pacerhq/pacer/channels"
)

// tokenSender answers with the token it was built with as ProviderID.
type tokenSender string

func (s tokenSender) Send(context.Context, channels.Message) (channels.Result, error) {
	return channels.Result{ProviderID: string(s)}, nil
}

// secretMount is a directory laid out as Kubernetes mounts a Secret: the
// files live in a timestamped directory, ..data points at it, and each key
// is a symlink through ..data. update swaps ..data atomically.
type secretMount struct {
	t   *testing.T
	dir string
	gen int
}

func (m *secretMount) update(files map[string]string) {
	m.t.Helper()
	m.gen++
	ts := filepath.Join(m.dir, "..2026_12_01_00_00_0"+string(rune('0'+m.gen)))
	if err := os.Mkdir(ts, 0o755); err != nil {
		m.t.Fatal(err)
	}
	for name, content := range files {
		if err := os.WriteFile(filepath.Join(ts, name), []byte(content), 0o600); err != nil {
			m.t.Fatal(err)
		}
	}
	tmp := filepath.Join(m.dir, "..data_tmp")
	if err := os.Symlink(filepath.Base(ts), tmp); err != nil {
		m.t.Fatal(err)
	}
	if err := os.Rename(tmp, filepath.Join(m.dir, "..data")); err != nil { // the atomic swap
		m.t.Fatal(err)
	}
	entries, _ := os.ReadDir(m.dir)
	for _, e := range entries {
		if !strings.HasPrefix(e.Name(), "..") {
			if _, ok := files[e.Name()]; !ok {
				os.Remove(filepath.Join(m.dir, e.Name()))
			}
		}
	}
	for name := range files {
		link := filepath.Join(m.dir, name)
		if _, err := os.Lstat(link); err == nil {
			continue
		}
		if err := os.Symlink(filepath.Join("..data", name), link); err != nil {
			m.t.Fatal(err)
		}
	}
}

func sendTo(t *testing.T, s channels.Sender, key string) (string, error) {
	t.Helper()
	res, err := s.Send(t.Context(), channels.Message{ID: "id", Key: key, To: "+1555"})
	return res.ProviderID, err
}

// TestKeyedSender: each pacing key sends with its own credential file; a
// key without one gets a Permanent no-credentials error (the default
// credential, when set, serves the keys it covers); changes made the way
// Kubernetes updates a Secret mount are picked up on the next read; a bad
// file keeps the previous credential; nothing of a credential reaches the
// log or an error.
func TestKeyedSender(t *testing.T) {
	const tokA, tokB, tokC, tokA2 = "EAAG-secret-A-111", "EAAG-secret-B-222", "EAAG-secret-C-333", "EAAG-secret-A-rotated"
	m := &secretMount{t: t, dir: t.TempDir()}
	m.update(map[string]string{"whatsapp.111": tokA + "\n", "whatsapp.222": tokB, "sendgrid.x": "SG.other-channel"})
	var logs bytes.Buffer
	build := func(_ context.Context, _ string, content []byte) (channels.Sender, error) {
		tok, err := plainSecret(content)
		if err != nil {
			return nil, err
		}
		if strings.Contains(tok, "bad") {
			return nil, errors.New("whatsapp: Config.Token refused")
		}
		return tokenSender(tok), nil
	}
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	k, err := newKeyedSender(ctx, "whatsapp", m.dir, build, nil, nil, slog.New(slog.NewTextHandler(&logs, nil)))
	if err != nil {
		t.Fatal(err)
	}
	want := func(key, tok string) {
		t.Helper()
		got, err := sendTo(t, k, key)
		if tok == "" {
			var e *channels.Error
			if !errors.As(err, &e) || e.Class != channels.Permanent || e.Code != channels.CodeNoCredentials || channels.MaybeAccepted(err) {
				t.Errorf("key %s: %q, %v; want permanent no-credentials, not sent", key, got, err)
			}
			return
		}
		if err != nil || got != tok {
			t.Errorf("key %s sent with %q, %v; want its credential", key, got, err)
		}
	}
	want("111", tokA)
	want("222", tokB)
	want("333", "")
	want("x", "") // another channel's file
	// The credential versions the pacer compares to close a breaker a
	// refused credential opened: they change with the credential in use.
	versions := func() [3]uint64 {
		return [3]uint64{k.CredentialVersion("111"), k.CredentialVersion("222"), k.CredentialVersion("333")}
	}
	v0 := versions()
	if v0[0] == v0[2] || v0[1] == v0[2] {
		t.Errorf("versions %v: keys 111 and 222 with a file have the version of 333 without one", v0)
	}

	m.update(map[string]string{"whatsapp.111": tokA2, "whatsapp.222": "bad-token", "whatsapp.333": tokC})
	if err := k.reload(ctx); err != nil {
		t.Fatal(err)
	}
	want("111", tokA2)
	want("222", tokB) // refused file: the previous credential stays
	want("333", tokC)
	if v1 := versions(); v1[0] == v0[0] || v1[1] != v0[1] || v1[2] == v0[2] {
		t.Errorf("versions %v after replacing 111, refusing 222's file and adding 333 (were %v): want 111 and 333 changed, 222 kept", v1, v0)
	}
	v1 := versions()
	if err := k.reload(ctx); err != nil {
		t.Fatal(err)
	}
	if v := versions(); v != v1 {
		t.Errorf("versions %v after a reload of unchanged files, want %v", v, v1)
	}

	m.update(map[string]string{"whatsapp.111": tokA2})
	if err := k.reload(ctx); err != nil {
		t.Fatal(err)
	}
	want("222", "")
	want("333", "")
	if v := versions(); v[0] != v1[0] || v[1] == v1[1] || v[2] == v1[2] {
		t.Errorf("versions %v after removing 222 and 333 (were %v): want 222 and 333 changed, 111 kept", v, v1)
	}

	// With a default credential, keys without a file use it.
	d, err := newKeyedSender(ctx, "whatsapp", m.dir, build, tokenSender("default"), nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	if got, _ := sendTo(t, d, "999"); got != "default" {
		t.Errorf("key without a file and a default: sent with %q", got)
	}
	if got, _ := sendTo(t, d, "111"); got != tokA2 {
		t.Errorf("key with a file and a default: sent with %q", got)
	}

	out := logs.String()
	for _, want := range []string{"credential added", "credential updated", "credential removed", "file=whatsapp.222"} {
		if !strings.Contains(out, want) {
			t.Errorf("log lacks %q:\n%s", want, out)
		}
	}
	for _, secret := range []string{tokA, tokB, tokC, tokA2, "bad-token"} {
		if strings.Contains(out, secret) {
			t.Errorf("log holds a credential (%s):\n%s", secret, out)
		}
	}
	if _, err := newKeyedSender(ctx, "whatsapp", filepath.Join(m.dir, "missing"), build, nil, nil, nil); err == nil ||
		!strings.Contains(err.Error(), "PACER_CREDENTIALS_DIR") {
		t.Errorf("missing directory: %v; want an error naming PACER_CREDENTIALS_DIR", err)
	}
}

// TestCredentialDecodeErrorsQuoteNothing: a malformed JSON credential is
// refused with an error that quotes none of its content.
func TestCredentialDecodeErrorsQuoteNothing(t *testing.T) {
	const secret = "-----BEGIN PRIVATE KEY-----MIGHAgEAMBMGByqGSM49"
	var v struct {
		KeyID string `json:"key_id"`
	}
	for _, content := range []string{`{"key_id":` + secret, `{"key_id":["` + secret + `"]}`, `{"` + secret + `":1}`, `"` + secret + `"`} {
		err := decodeCredential([]byte(content), &v)
		if err == nil || strings.Contains(err.Error(), "MIGHAgEA") || strings.Contains(err.Error(), "PRIVATE") {
			t.Errorf("decode %q: %v; want an error quoting nothing of the file", content, err)
		}
	}
}

// TestPlainSecretRefusesControlCharacters: a secret file is one line of
// printable text around white space; a control character inside it (a
// stray escape, a NUL) is refused when the file is loaded, where the log
// names the file, rather than failing every send later as a bad request.
func TestPlainSecretRefusesControlCharacters(t *testing.T) {
	for _, c := range []struct {
		content, want, err string
	}{
		{"EAAG-token\n", "EAAG-token", ""},
		{"  EAAG-token \t\n", "EAAG-token", ""},
		{"", "", "empty"},
		{"EAAG\nsecond", "", "more than one line"},
		{"EAAG\x1b[0m-token", "", "control character (at byte 4)"},
		{"EAAG\x00token", "", "control character (at byte 4)"},
		{"EAAG\ttoken", "", "control character (at byte 4)"},
		{"EAAG\x7ftoken", "", "control character (at byte 4)"},
	} {
		got, err := plainSecret([]byte(c.content))
		if c.err == "" {
			if err != nil || got != c.want {
				t.Errorf("plainSecret(%q) = %q, %v; want %q", c.content, got, err, c.want)
			}
			continue
		}
		if err == nil || !strings.Contains(err.Error(), c.err) || strings.Contains(err.Error(), "EAAG") {
			t.Errorf("plainSecret(%q) error %v; want one saying %q, quoting nothing of the secret", c.content, err, c.err)
		}
	}
}

// TestKeyedSenderAccounts: keys whose files hold the same credential share
// an account (an account-scoped throttle cools them down together), keys
// with another credential have another, and a key on no file of its own has
// the channel's (""); the name never holds the credential.
func TestKeyedSenderAccounts(t *testing.T) {
	const tokA, tokB = "EAAG-secret-A-111", "EAAG-secret-B-222"
	m := &secretMount{t: t, dir: t.TempDir()}
	m.update(map[string]string{"whatsapp.111": tokA, "whatsapp.112": tokA + "\n", "whatsapp.222": tokB})
	build := func(_ context.Context, _ string, content []byte) (channels.Sender, error) {
		tok, err := plainSecret(content)
		if err != nil {
			return nil, err
		}
		return tokenSender(tok), nil
	}
	k, err := newKeyedSender(t.Context(), "whatsapp", m.dir, build, tokenSender("default"), nil, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	a, a2, b, none := k.Account("111"), k.Account("112"), k.Account("222"), k.Account("333")
	if a == "" || a != a2 || b == "" || b == a || none != "" {
		t.Errorf("accounts 111 %q, 112 %q, 222 %q, 333 %q; want 111 = 112 (same token), 222 another, 333 none", a, a2, b, none)
	}
	for _, name := range []string{a, b} {
		if strings.Contains(tokA+tokB, name) {
			t.Errorf("account name %q is part of a credential", name)
		}
	}
}
