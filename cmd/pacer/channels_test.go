package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"reflect"
	"regexp"
	"strings"
	"testing"

	"github.com/pacerhq/pacer/channels"
	"github.com/pacerhq/pacer/channels/fcm/fcmtest"
)

// TestChannelTable: names are unique and usable as variable prefixes and
// topic suffixes, and every row has a sender, a demo, a fake provider and a
// valid default limit.
func TestChannelTable(t *testing.T) {
	seen := map[string]bool{}
	for _, ch := range channelTable {
		if !regexp.MustCompile(`^[a-z][a-z0-9]*$`).MatchString(ch.name) || seen[ch.name] {
			t.Errorf("channel name %q: want unique lowercase letters and digits", ch.name)
		}
		seen[ch.name] = true
		if ch.sender == nil || ch.demo == nil || ch.fake == nil || ch.keys == "" {
			t.Errorf("%s: row lacks a sender, a demo, a fake or its keys' description", ch.name)
		}
		c, errs := readChannel(&ch, lookupMap(nil))
		if len(errs) > 0 {
			t.Errorf("%s: defaults do not read: %v", ch.name, errs)
		}
		if err := c.limit.Validate(); err != nil {
			t.Errorf("%s: default limit: %v", ch.name, err)
		}
	}
}

// TestDemoEveryChannel runs `pacer demo` on each row's fake: every message
// arrives once, none throttled by the strict fake. It checks the row's
// wiring (fake, adapter, envelopes), not pacing precision: the 15 messages
// of a key fit in the fake's burst (10 + a tenth of 50), so a stall of the
// race detector on a loaded machine cannot bunch them into a throttle; the
// end-to-end tests measure the pacing.
func TestDemoEveryChannel(t *testing.T) {
	for _, ch := range channelTable {
		t.Run(ch.name, func(t *testing.T) {
			report := filepath.Join(t.TempDir(), "report.json")
			var out, errb bytes.Buffer
			err := cmdDemo(context.Background(), []string{"--channel", ch.name, "--numbers", "2", "--messages", "15",
				"--rate", "50", "--burst", "10", "--partitions", "2", "--report", report}, &out, &errb)
			if err != nil {
				t.Fatalf("demo: %v\n%s\n%s", err, out.String(), errb.String())
			}
			b, err := os.ReadFile(report)
			if err != nil {
				t.Fatal(err)
			}
			var rep demoReport
			if err := json.Unmarshal(b, &rep); err != nil {
				t.Fatal(err)
			}
			if len(rep.Keys) != 2 || rep.Lost != 0 {
				t.Fatalf("report %+v: want 2 keys, none lost", rep)
			}
			for _, k := range rep.Keys {
				if k.Delivered != 15 || k.Duplicates != 0 || k.Throttled != 0 {
					t.Errorf("key %s: %+v, want 15 delivered once, none throttled", k.Key, k)
				}
			}
		})
	}
}

// TestREADMEListsEverySetting: the settings tables of
// docs/configuration.md have a row for every variable the command reads,
// and no other.
func TestREADMEListsEverySetting(t *testing.T) {
	readme, err := os.ReadFile("../../docs/configuration.md")
	if err != nil {
		t.Fatal(err)
	}
	listed := map[string]bool{}
	for _, m := range regexp.MustCompile("(?m)^\\| `(PACER_[A-Z0-9_]+)` \\|").FindAllSubmatch(readme, -1) {
		listed[string(m[1])] = true
	}
	want := map[string]bool{"PACER_CREDENTIALS_DIR": true} // read by every channel row
	for _, tp := range []reflect.Type{reflect.TypeOf(config{}), reflect.TypeOf(ingestConfig{}), reflect.TypeOf(webhookConfig{})} {
		for i := range tp.NumField() {
			if v := envName(tp.Field(i)); v != "" {
				want[v] = true
			}
		}
	}
	for _, ch := range channelTable {
		for _, v := range ch.variables() {
			want[v] = true
		}
	}
	for v := range want {
		if !listed[v] {
			t.Errorf("docs/configuration.md's settings tables lack %s", v)
		}
	}
	for v := range listed {
		if !want[v] && !strings.HasPrefix(v, "PACER_TEST_") {
			t.Errorf("docs/configuration.md's settings tables list %s, which the command does not read", v)
		}
	}
}

// TestFCMDataIDKey: pacer run's FCM sender puts the envelope id in
// message.data as pacer_id by default (FCM may have delivered a message it
// answered 503, and the app drops the retried copy by that id); an empty
// PACER_FCM_DATA_ID_KEY sends the data as given; a key FCM reserves stops
// start-up naming the setting.
func TestFCMDataIDKey(t *testing.T) {
	f := fcmtest.NewServer(fcmtest.Config{})
	defer f.Close()
	cred := filepath.Join(t.TempDir(), "sa.json")
	if err := os.WriteFile(cred, f.ServiceAccountJSON(), 0o600); err != nil {
		t.Fatal(err)
	}
	ch := channelRow(t, "fcm")
	for i, c := range []struct {
		set     map[string]string
		wantID  string
		refused string
	}{
		{nil, "env-0", ""},
		{map[string]string{"PACER_FCM_DATA_ID_KEY": ""}, "", ""},
		{map[string]string{"PACER_FCM_DATA_ID_KEY": "google.id"}, "", "PACER_FCM_DATA_ID_KEY"},
	} {
		env := map[string]string{"PACER_FCM_BASE_URL": f.URL(), "PACER_FCM_CREDENTIALS_FILE": cred}
		maps.Copy(env, c.set)
		cv, errs := readChannel(ch, lookupMap(env))
		if c.refused != "" {
			if len(errs) == 0 || !strings.Contains(fmt.Sprint(errs), c.refused) {
				t.Errorf("%v: errors %v; want one naming %s", c.set, errs, c.refused)
			}
			continue
		}
		if len(errs) > 0 {
			t.Fatalf("%v: %v", c.set, errs)
		}
		s, err := ch.sender(t.Context(), cv.vars)
		if err != nil {
			t.Fatal(err)
		}
		id := fmt.Sprintf("env-%d", i)
		if _, err := s.Send(t.Context(), channels.Message{ID: id, Key: "demo-project", To: "device-token-1",
			Payload: json.RawMessage(`{"data":{"k":"v"}}`)}); err != nil {
			t.Fatal(err)
		}
		as := f.Arrivals()
		if got := as[len(as)-1].ID; got != c.wantID {
			t.Errorf("%v: message.data[pacer_id] = %q, want %q", c.set, got, c.wantID)
		}
	}
}
