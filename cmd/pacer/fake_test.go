package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/pacerhq/pacer/channels"
)

// fakeSamples holds, per channel, a message as `pacer run` hands it to the
// adapter, the flags that give its key (or recipient) a bucket of one
// message that does not refill during the test, and the shape of the
// provider's id for an accepted send.
var fakeSamples = map[string]struct {
	msg   channels.Message
	flags []string
	id    string // regexp of Result.ProviderID
}{
	"whatsapp": {channels.Message{Key: "106540352200001", To: "15550001234", Payload: json.RawMessage(`{"type":"text","text":{"body":"hi"}}`)},
		[]string{"--rate", "0.001", "--burst", "1"}, `^wamid\.`},
	"apns": {channels.Message{Key: "com.example.app", To: strings.Repeat("0a", 32), Payload: json.RawMessage(`{"headers":{"apns-push-type":"alert"},"aps":{"alert":"hi"}}`)},
		[]string{"--device-rate", "0.001", "--device-burst", "1"}, `^[0-9a-f]{8}-[0-9a-f]{4}-4[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$`},
	"fcm": {channels.Message{Key: "fake-project", To: "device-token-1", Payload: json.RawMessage(`{"notification":{"title":"hi"}}`)},
		[]string{"--rate", "0.001", "--burst", "1"}, `^projects/fake-project/messages/`},
	"sendgrid": {channels.Message{Key: "fake", To: "user@example.com", Payload: json.RawMessage(`{"from":{"email":"news@example.com"},"subject":"Hi","content":[{"type":"text/plain","value":"hi"}]}`)},
		[]string{"--rate", "0.001", "--burst", "1"}, `^[0-9a-f]{12}[0-9]{10}$`},
}

// TestFakeProviderEveryChannel runs `pacer fake-provider --channel C`
// in-process for each row of the channel table, points the row's adapter at
// it with the settings it printed, exactly as `pacer run` reads them, and
// sends: the first message is accepted with the provider's id after the
// --answer-time given, the second
// to the same key or device is throttled (the fake's limit, with no spare
// burst), and GET /_stats counts both.
func TestFakeProviderEveryChannel(t *testing.T) {
	for _, ch := range channelTable {
		t.Run(ch.name, func(t *testing.T) {
			sample, ok := fakeSamples[ch.name]
			if !ok {
				t.Fatalf("no sample message for channel %s in fakeSamples", ch.name)
			}
			dir := t.TempDir()
			ctx, cancel := context.WithCancel(t.Context())
			pr, pw := io.Pipe()
			var errb bytes.Buffer // read once the command returned
			done := make(chan error, 1)
			go func() {
				err := cmdFakeProvider(ctx, append([]string{"--channel", ch.name, "--dir", dir, "--answer-time", "40ms-60ms"}, sample.flags...), pw, &errb)
				pw.Close()
				done <- err
			}()
			defer func() {
				cancel()
				if err := <-done; err != nil {
					t.Errorf("fake-provider returned %v; want nil after a shutdown", err)
				}
			}()
			out := bufio.NewReader(pr)
			var lines []string
			for range 3 { // the URL, a title, the settings
				line, err := out.ReadString('\n')
				if err != nil {
					err = errors.Join(err, <-done)
					done <- nil
					t.Fatalf("fake-provider printed %q, then: %v\n%s", lines, err, errb.String())
				}
				lines = append(lines, line)
			}
			go io.Copy(io.Discard, out) // it prints nothing more
			listening := regexp.MustCompile(`^fake \S+ listening on (http://\S+) `).FindStringSubmatch(lines[0])
			if listening == nil {
				t.Fatalf("first line %q: want the URL", lines[0])
			}
			base := listening[1]
			settings := map[string]string{}
			for _, m := range regexp.MustCompile(`(PACER_[A-Z0-9_]+)=('[^']*'|\S+)`).FindAllStringSubmatch(lines[2], -1) {
				settings[m[1]] = strings.Trim(m[2], "'")
			}
			if settings[ch.prefix()+"BASE_URL"] != base {
				t.Fatalf("printed %q; want %sBASE_URL=%s", lines, ch.prefix(), base)
			}
			for name, v := range settings {
				if !strings.HasPrefix(name, ch.prefix()) {
					t.Errorf("printed %s, which is not a setting of channel %s", name, ch.name)
				}
				if strings.HasPrefix(v, dir) {
					if _, err := os.Stat(v); err != nil {
						t.Errorf("%s=%s: %v", name, v, err)
					}
				}
			}
			c, errs := readChannel(&ch, lookupMap(settings))
			if len(errs) > 0 {
				t.Fatalf("the printed settings do not read: %v", errs)
			}
			s, err := ch.sender(ctx, c.vars)
			if err != nil {
				t.Fatalf("adapter from the printed settings: %v", err)
			}
			m := sample.msg
			m.ID = "fake-1"
			start := time.Now()
			res, err := s.Send(ctx, m)
			if err != nil || !regexp.MustCompile(sample.id).MatchString(res.ProviderID) {
				t.Fatalf("first send: %+v, %v; want a provider id like %s", res, err, sample.id)
			}
			if took := time.Since(start); took < 40*time.Millisecond {
				t.Errorf("first send answered after %v; want --answer-time 40ms-60ms at least", took)
			}
			m.ID = "fake-2"
			_, err = s.Send(ctx, m)
			var e *channels.Error
			if !errors.As(err, &e) || e.Class != channels.Throttle || e.Channel != ch.name {
				t.Fatalf("second send: %v; want a throttle of channel %s", err, ch.name)
			}
			resp, err := http.Get(base + "/_stats")
			if err != nil {
				t.Fatal(err)
			}
			defer resp.Body.Close()
			var stats map[string]struct{ Delivered, Throttled int }
			if err := json.NewDecoder(resp.Body).Decode(&stats); err != nil {
				t.Fatal(err)
			}
			if st := stats[m.Key]; len(stats) != 1 || st.Delivered != 1 || st.Throttled != 1 {
				t.Errorf("/_stats = %+v; want %s: 1 delivered, 1 throttled", stats, m.Key)
			}
		})
	}
}

// TestFakeProviderRefuses: a channel that is missing, unknown or given
// twice, a negative or non-finite limit of any channel's fake, and a bad
// credential flag are refused with exit status 2 naming them, before
// anything listens.
func TestFakeProviderRefuses(t *testing.T) {
	for _, c := range []refusal{
		{[]string{}, "--channel is required (" + channelList() + ")"},
		{[]string{"--addr", ":0"}, "--channel is required"},
		{[]string{"--channel", "sms"}, `unknown channel "sms"`},
		{[]string{"whatsapp", "--channel", "apns"}, "channel whatsapp and --channel apns: give one"},
		{[]string{"--channel", "apns", "--device-rate", "-1"}, "--device-rate -1: must be a finite number >= 0"},
		{[]string{"--channel", "apns", "--device-burst", "-1"}, "--device-burst -1: must be >= 0"},
		{[]string{"--channel", "apns", "--key-id", "short"}, `--key-id "short": must be 10 letters or digits`},
		{[]string{"--channel", "fcm", "--rate", "Inf"}, "--rate +Inf: must be a finite number >= 0"},
		{[]string{"--channel", "fcm", "--device-rate", "NaN"}, "--device-rate NaN: must be a finite number >= 0"},
		{[]string{"--channel", "sendgrid", "--burst", "-3"}, "--burst -3: must be >= 0"},
		{[]string{"--channel", "sendgrid", "--api-keys", "nokey"}, "--api-keys: entry 1 is not name=value"},
		{[]string{"--channel", "whatsapp", "--account-window", "-1s"}, "--account-window -1s: must be > 0"},
		{[]string{"--channel", "fcm", "--answer-time", "350ms-250ms"}, `--answer-time "350ms-250ms": want 0 <= low <= high`},
		{[]string{"--channel", "apns", "--answer-time", "soon"}, `--answer-time "soon": want a duration ("300ms"), a range`},
	} {
		// A fake that starts anyway is stopped after a while, and fails.
		ctx, cancel := context.WithTimeout(t.Context(), 5*time.Second)
		var out, errb bytes.Buffer
		code := run(ctx, append(append([]string{"fake-provider"}, c.args...), "--dir", t.TempDir()), strings.NewReader(""), &out, &errb, lookupMap(nil))
		cancel()
		if code != 2 || !strings.Contains(errb.String(), "pacer: fake-provider: "+c.want) || strings.Contains(out.String(), "listening") {
			t.Errorf("fake-provider %q: exit %d, stdout %q, stderr %q; want exit 2 naming %q", c.args, code, out.String(), errb.String(), c.want)
		}
	}
}

// TestFakeProviderDirMustExist: a --dir that does not exist, or is not a
// directory, is refused with exit status 2 naming it, before anything
// listens, and nothing is created: a mistyped path used to be created and
// left holding a credential file (FCM's service account, APNs's signing
// key) after the fake stopped.
func TestFakeProviderDirMustExist(t *testing.T) {
	parent := t.TempDir()
	file := filepath.Join(parent, "file")
	if err := os.WriteFile(file, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		dir, want string
	}{
		{filepath.Join(parent, "none"), "does not exist"},
		{filepath.Join(parent, "none", "deeper"), "does not exist"},
		{file, "is not a directory"},
	} {
		ctx, cancel := context.WithTimeout(t.Context(), 5*time.Second)
		var out, errb bytes.Buffer
		code := run(ctx, []string{"fake-provider", "--channel", "fcm", "--dir", c.dir}, strings.NewReader(""), &out, &errb, lookupMap(nil))
		cancel()
		want := "pacer: fake-provider: --dir " + c.dir + ": " + c.want
		if code != 2 || !strings.HasPrefix(errb.String(), want) || strings.Contains(out.String(), "listening") {
			t.Errorf("--dir %s: exit %d, stdout %q, stderr %q; want exit 2 and %q", c.dir, code, out.String(), errb.String(), want)
		}
	}
	if entries, err := os.ReadDir(parent); err != nil || len(entries) != 1 {
		t.Errorf("after the refusals %s holds %v (err %v), want only the file", parent, entries, err)
	}
}
