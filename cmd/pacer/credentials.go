package main

// Credentials per sender: one file per pacing key in PACER_CREDENTIALS_DIR,
// as a Kubernetes Secret mounts them, re-read while `pacer run` runs.

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/pacerhq/pacer/channels"
	"github.com/pacerhq/pacer/internal/tick"
	"github.com/pacerhq/pacer/pacer/consumer"
)

// credentialsPoll is how often the credentials directory is read again.
// Reading follows symlinks, so Kubernetes' update of a Secret mount (a new
// timestamped directory, then an atomic swap of the ..data symlink the
// files point through) is seen whole at the next read, and a file edited
// in place too. A few small files every 2 s cost nothing next to the sends.
const credentialsPoll = 2 * time.Second

// credentialFileName returns the file name of key's credential for channel:
// "<channel>.<pacing key>", for example whatsapp.106540352242922 or
// apns.com.example.app. Kubernetes allows these characters in Secret keys
// (letters, digits, '-', '_', '.'), and the channel prefix lets one Secret
// hold the credentials of every channel.
func credentialFileName(channel, key string) string { return channel + "." + key }

// buildFunc builds the sender of one pacing key from its credential file's
// content. Its error names what is wrong, never the content.
type buildFunc func(ctx context.Context, key string, content []byte) (channels.Sender, error)

// keyedSender is a [channels.Sender] that sends each message with the
// client of its pacing key's credential: the one in the credentials
// directory, else the default (the single-credential variables) when
// serves(key), else none: a Permanent [channels.CodeNoCredentials] error
// without a request. It is safe for concurrent use.
type keyedSender struct {
	channel string
	dir     string
	build   buildFunc
	def     channels.Sender       // nil: no default credential
	serves  func(key string) bool // keys def serves; nil: all
	log     *slog.Logger

	mu      sync.RWMutex
	senders map[string]channels.Sender // by pacing key
	sums    map[string][32]byte        // content digest of each key's file, loaded or refused
	account map[string]string          // by pacing key: the digest of the credential in use (see Account)
	vers    map[string]uint64          // by pacing key: +1 each time its credential is added, replaced or removed
}

var (
	_ consumer.CredentialVersioner = (*keyedSender)(nil)
	_ consumer.AccountNamer        = (*keyedSender)(nil)
)

// CredentialVersion is [consumer.CredentialVersioner]: it changes whenever
// key's credential file is added, replaced by one that builds a client, or
// removed, so a key's breaker that a refused credential opened closes once
// the file is fixed.
func (k *keyedSender) CredentialVersion(key string) uint64 {
	k.mu.RLock()
	defer k.mu.RUnlock()
	return k.vers[key]
}

// newKeyedSender reads dir once, so that `pacer run` starts with every
// credential in it, and then every [credentialsPoll] until ctx ends. A dir
// that cannot be read is an error at start-up, and a warning later (the
// credentials loaded stay in use). A file that does not build a client is
// logged (its name and the problem, never its content) and skipped; a
// previously loaded credential of that key stays in use.
func newKeyedSender(ctx context.Context, channel, dir string, build buildFunc, def channels.Sender,
	serves func(string) bool, log *slog.Logger) (*keyedSender, error) {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	k := &keyedSender{channel: channel, dir: dir, build: build, def: def, serves: serves, log: log,
		senders: map[string]channels.Sender{}, sums: map[string][32]byte{}, vers: map[string]uint64{}, account: map[string]string{}}
	if err := k.reload(ctx); err != nil {
		return nil, &configError{"PACER_CREDENTIALS_DIR", err.Error()}
	}
	go tick.Every(ctx, credentialsPoll, func(time.Time) {
		if err := k.reload(ctx); err != nil {
			k.log.Warn("credentials directory not readable; keeping the credentials loaded", "err", err)
		}
	})
	return k, nil
}

// reload reads the directory and builds a client for every file that is
// new or changed since the last read; a removed file removes its key.
func (k *keyedSender) reload(ctx context.Context) error {
	entries, err := os.ReadDir(k.dir)
	if err != nil {
		return fmt.Errorf("cannot read the credentials directory: %s", pathError(err))
	}
	prefix := k.channel + "."
	seen := map[string]bool{}
	for _, e := range entries {
		name := e.Name()
		key, ok := strings.CutPrefix(name, prefix)
		// "..data" and "..2026_..." are Kubernetes' own; other channels' files are not ours.
		if !ok || key == "" || strings.HasPrefix(name, ".") {
			continue
		}
		b, err := os.ReadFile(filepath.Join(k.dir, name))
		if err != nil {
			if info, serr := os.Stat(filepath.Join(k.dir, name)); serr == nil && info.IsDir() {
				continue
			}
			k.log.Error("credential file not readable; skipped", "file", name, "err", pathError(err))
			seen[key] = k.has(key) // keep what was loaded: the file may be mid-swap
			continue
		}
		seen[key] = true
		sum := sha256.Sum256(b)
		k.mu.RLock()
		old, known := k.sums[key]
		k.mu.RUnlock()
		if known && old == sum {
			continue
		}
		s, err := k.build(ctx, key, b)
		k.mu.Lock()
		k.sums[key] = sum
		_, had := k.senders[key]
		if err == nil {
			k.senders[key] = s
			k.vers[key]++
			acct := sha256.Sum256(bytes.TrimSpace(b)) // the credential, whatever white space surrounds it
			k.account[key] = hex.EncodeToString(acct[:6])
		}
		k.mu.Unlock()
		switch {
		case err != nil && had:
			k.log.Error("credential file refused; the key keeps its previous credential", "file", name, "err", err)
		case err != nil:
			k.log.Error("credential file refused; the key has no credential", "file", name, "err", err)
		case had:
			k.log.Info("credential updated", "channel", k.channel, "key", key)
		default:
			k.log.Info("credential added", "channel", k.channel, "key", key)
		}
	}
	k.mu.Lock()
	var removed []string
	for key := range k.sums {
		if !seen[key] {
			delete(k.sums, key)
			if _, ok := k.senders[key]; ok {
				delete(k.senders, key)
				delete(k.account, key)
				k.vers[key]++
				removed = append(removed, key)
			}
		}
	}
	k.mu.Unlock()
	slices.Sort(removed)
	for _, key := range removed {
		k.log.Info("credential removed", "channel", k.channel, "key", key)
	}
	return nil
}

// Account names key's account: the keys whose credential files hold the
// same credential share one (a digest of it: a token or a service
// account, never the file's text); "" for a key on the channel's default
// credential or with none. WhatsApp's 80007 (per business account) and 4
// (per app) then cool down the keys behind that credential only.
func (k *keyedSender) Account(key string) string {
	k.mu.RLock()
	defer k.mu.RUnlock()
	return k.account[key]
}

func (k *keyedSender) has(key string) bool {
	k.mu.RLock()
	defer k.mu.RUnlock()
	_, ok := k.senders[key]
	return ok
}

// Send sends m with its key's client.
func (k *keyedSender) Send(ctx context.Context, m channels.Message) (channels.Result, error) {
	k.mu.RLock()
	s, ok := k.senders[m.Key]
	k.mu.RUnlock()
	if !ok && k.def != nil && (k.serves == nil || k.serves(m.Key)) {
		s, ok = k.def, true
	}
	if !ok {
		return channels.Result{}, &channels.Error{Channel: k.channel, Class: channels.Permanent,
			Code:   channels.CodeNoCredentials,
			Detail: "no credential for this pacing key: add the file " + credentialFileName(k.channel, "<key>") + " to PACER_CREDENTIALS_DIR, then replay with --reason no-credentials"}
	}
	return s.Send(ctx, m)
}

// credentialsSender returns the channel's sender: def (built from the
// single-credential variables; nil when they are unset) alone when
// PACER_CREDENTIALS_DIR is unset, else a [keyedSender] over the directory
// with def as the default of every key it serves. With neither, the error
// names missing, the variable the channel would need.
func credentialsSender(ctx context.Context, v channelVars, build buildFunc, def channels.Sender,
	serves func(string) bool, missing error) (channels.Sender, error) {
	if v.credDir == "" {
		if def == nil {
			return nil, missing
		}
		return def, nil
	}
	return newKeyedSender(ctx, v.ch.name, v.credDir, build, def, serves, v.log)
}

// plainSecret reads a credential file holding one secret (an access token,
// an API key): its content without surrounding white space.
func plainSecret(content []byte) (string, error) {
	s := string(bytes.TrimSpace(content))
	if s == "" {
		return "", errors.New("the file is empty")
	}
	if strings.ContainsAny(s, "\r\n") {
		return "", errors.New("the file holds more than one line")
	}
	// A secret goes into a request header, where a control character is
	// refused by the client or the provider: every send would fail later
	// as a bad request. The character is not quoted (it is in a secret).
	if i := strings.IndexFunc(s, func(r rune) bool { return r < 0x20 || r == 0x7f }); i >= 0 {
		return "", fmt.Errorf("the secret holds a control character (at byte %d)", i)
	}
	return s, nil
}

// decodeCredential decodes a JSON credential file into v, with an error
// that names the problem but quotes nothing of the content.
func decodeCredential(content []byte, v any) error {
	dec := json.NewDecoder(bytes.NewReader(content))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		var se *json.SyntaxError
		var te *json.UnmarshalTypeError
		switch {
		case errors.As(err, &se):
			return fmt.Errorf("not valid JSON (offset %d)", se.Offset)
		case errors.As(err, &te):
			return fmt.Errorf("field %q has the wrong type", te.Field)
		case strings.HasPrefix(err.Error(), "json: unknown field "):
			// Not named: a misplaced secret could be the field name.
			return errors.New("has a field that is not part of the format")
		}
		return errors.New("not a JSON object")
	}
	return nil
}

// clientCache builds one client per id (a digest of the credential) and
// hands it out again, so that pacing keys sharing a credential share its
// client: its connections and its cached tokens. Clients are kept for the
// life of the process.
type clientCache[C any] struct {
	mu sync.Mutex
	m  map[string]C
}

func newClientCache[C any]() *clientCache[C] { return &clientCache[C]{m: map[string]C{}} }

func (c *clientCache[C]) get(id string, build func() (C, error)) (C, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if v, ok := c.m[id]; ok {
		return v, nil
	}
	v, err := build()
	if err == nil {
		c.m[id] = v
	}
	return v, err
}
