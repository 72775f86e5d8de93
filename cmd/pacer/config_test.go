package main

import (
	"bytes"
	"context"
	"errors"
	"io"
	"maps"
	"net"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/pacerhq/pacer/bucket"
	"github.com/pacerhq/pacer/bucket/adapt"
	"github.com/prometheus/client_golang/prometheus"
)

func lookupMap(m map[string]string) func(string) (string, bool) {
	return func(k string) (string, bool) { v, ok := m[k]; return v, ok }
}

// whatsappRow is the whatsapp row of the channel table.
func whatsappRow(t *testing.T) *channel {
	t.Helper()
	return channelRow(t, "whatsapp")
}

// channelRow is the row of the channel table named name; there being none
// fails the test.
func channelRow(t *testing.T, name string) *channel {
	t.Helper()
	ch, err := channelNamed(name)
	if err != nil {
		t.Fatal(err)
	}
	return ch
}

func TestLoadConfigDefaults(t *testing.T) {
	c, err := loadConfig(lookupMap(nil), whatsappRow(t))
	if err != nil {
		t.Fatal(err)
	}
	if got := strings.Join(c.KafkaBrokers, ","); got != "127.0.0.1:9092" {
		t.Errorf("KafkaBrokers = %q", got)
	}
	wa := c.channels["whatsapp"]
	if c.RedisURL != "redis://127.0.0.1:6379/0" || c.MetricsAddr != ":9464" || c.Drain != 30*time.Second ||
		c.MaxAttempts != 5 || wa.limit != (bucket.Limit{PerSecond: 80, Burst: 10}) || wa.recipient != (bucket.Limit{}) ||
		wa.vars.get("BASE_URL") != "https://graph.facebook.com" || wa.vars.get("API_VERSION") != "v26.0" {
		t.Errorf("defaults = %+v", c)
	}
	if fcm := c.channels["fcm"]; fcm.limit != (bucket.Limit{PerSecond: 10000, Burst: 10000}) ||
		fcm.recipient != (bucket.Limit{PerSecond: 4.0 / 3, Burst: 160}) {
		t.Errorf("fcm defaults = %+v", fcm)
	}
	pc := c.pacerConfig(whatsappRow(t))
	// MinCooldown 0: one token interval of the channel's rate (adapt.AIMD).
	if pc.AIMD.MaxCooldown != time.Hour || pc.AIMD.MinCooldown != 0 || pc.AIMD.Floor != 0 || pc.AIMD.Decrease != 0.8 ||
		pc.AIMD.Window != 2*time.Second || pc.AIMD.Step != 0 || pc.Breaker.OpenFor != 30*time.Second {
		t.Errorf("pacer config = %+v", pc)
	}
}

// TestMaxCooldownIsTheOneCap: PACER_MAX_COOLDOWN reaches AIMD.MaxCooldown,
// the one field that caps cooldowns, retries and requeues (the pacer's own
// tests show the cap holds).
func TestMaxCooldownIsTheOneCap(t *testing.T) {
	c, err := loadConfig(lookupMap(map[string]string{"PACER_MAX_COOLDOWN": "10s"}), whatsappRow(t))
	if err != nil {
		t.Fatal(err)
	}
	if got := c.pacerConfig(whatsappRow(t)).AIMD.MaxCooldown; got != 10*time.Second {
		t.Errorf("AIMD.MaxCooldown = %v, want 10s", got)
	}
}

// TestLoadConfigJoinsEveryProblem: one start-up names every bad variable,
// the command's own, the pacer's and each channel's.
func TestLoadConfigJoinsEveryProblem(t *testing.T) {
	bad := map[string]string{
		"PACER_LOG_FORMAT": "xml", "PACER_AIMD_FLOOR": "100", "PACER_BREAKER_MAX_OPEN": "1s", "PACER_DRAIN": "-1s",
		"PACER_APNS_RATE": "0", "PACER_SENDGRID_BURST": "many", "PACER_FCM_BASE_URL": "ftp://x", "PACER_MAX_ATTEMPTS": "0",
		// Values that do not parse at all: each is named, not only the first.
		"PACER_AIMD_WINDOW": "soon", "PACER_RETRY_DELAYS": "5s,,x", "PACER_INFLIGHT": "many",
		// The run's own channel's settings wrong do not hide the pacer's
		// rules (PACER_LEASE_SIZE is one).
		"PACER_WHATSAPP_BASE_URL": "x", "PACER_WHATSAPP_PAIR_BURST": "0", "PACER_LEASE_SIZE": "-1",
	}
	_, err := loadConfig(lookupMap(bad), whatsappRow(t))
	if err == nil {
		t.Fatal("loadConfig accepted it")
	}
	for v := range bad {
		if !strings.Contains(err.Error(), v+": ") {
			t.Errorf("error does not name %s:\n%v", v, err)
		}
	}
	if n := strings.Count(err.Error(), "\n") + 1; n != len(bad) {
		t.Errorf("%d problems reported, want %d:\n%v", n, len(bad), err)
	}
}

func TestLoadConfigNamesTheBadVariable(t *testing.T) {
	for _, c := range []struct{ name, val string }{
		{"PACER_WHATSAPP_RATE", "0"},
		{"PACER_WHATSAPP_RATE", "-3"},
		{"PACER_WHATSAPP_RATE", "fast"},
		{"PACER_WHATSAPP_RATE", "Inf"},
		{"PACER_WHATSAPP_RATE", "NaN"},
		{"PACER_WHATSAPP_RATE", "1e308"},
		{"PACER_INFLIGHT", "0"},
		{"PACER_WHATSAPP_PAIR_RATE", "-1"},
		{"PACER_WHATSAPP_PAIR_BURST", "-1"},
		{"PACER_REDIS_SENTINEL_MASTER", "mymaster"},
		{"PACER_RETRY_DELAYS", ","},
		{"PACER_AIMD_FLOOR", "20000"},
		{"PACER_AIMD_FLOOR", "100"},      // above the whatsapp rate, 80
		{"PACER_MAX_COOLDOWN", "-1s"},    // 100ms is valid: the default shortest cooldown (one token interval) follows it
		{"PACER_FCM_DEVICE_BURST", "-1"}, // a recipient bucket that is on; an off one (rate 0) has no burst to check
		{"PACER_FCM_DEVICE_BURST", "0"},
		{"PACER_LEASE_SIZE", "-1"},
		{"PACER_WHATSAPP_BURST", "0"},
		{"PACER_WHATSAPP_BURST", "1.5"},
		{"PACER_REDIS_URL", "http://x"},
		{"PACER_REDIS_URL", "redis://127.0.0.1:99999/0"},
		{"PACER_KAFKA_BROKERS", "a:b:c"},
		{"PACER_IDEMPOTENCY_TTL", "3s"},
		{"PACER_LEDGER_TTL", "3s"},
		{"PACER_LEDGER_TTL", "6m"}, // below 1.2 x 5m + 1m
		{"PACER_LEDGER_FLUSH", "0s"},
		{"PACER_LEDGER_FLUSH", "2s"},
		{"PACER_SEND_TIMEOUT", "1ns"},
		{"PACER_PROGRESS_INTERVAL", "1ns"},
		{"PACER_KAFKA_BROKERS", "nohostport"},
		{"PACER_DRAIN", "soon"},
		{"PACER_DRAIN", "0s"},
		{"PACER_MAX_ATTEMPTS", "0"},
		{"PACER_LOG_LEVEL", "loud"},
		{"PACER_LOG_FORMAT", "xml"},
		{"PACER_WHATSAPP_BASE_URL", "graph.facebook.com"},
		{"PACER_REDIS_PREFIX", "a{b}"},
		{"PACER_MAX_TOKEN_WAIT", "0s"},
		{"PACER_RETRY_DELAYS", "5s,-1s"},
		{"PACER_RETRY_DELAYS", "5s,often"},
		{"PACER_UNKNOWN_OUTCOME", "guess"},
		{"PACER_IDEMPOTENCY_TTL", "0s"},
		{"PACER_REDIS_FAILURE", "open"},
		{"PACER_EXPECTED_REPLICAS", "0"},
		{"PACER_STATUS_HISTORY_KEYS", "0"},
		{"PACER_STATUS_HISTORY_KEYS", "100001"},
		{"PACER_PORTFOLIO_WINDOW", "500ms"},
		{"PACER_PORTFOLIO_WINDOW", "48h"},
		{"PACER_PORTFOLIO_WINDOW", "daily"},
		{"PACER_METRICS_ADDR", ""}, // would listen on a random port of every interface
		{"PACER_METRICS_ADDR", "9464"},
		{"PACER_AIMD_DECREASE", "1.5"},
		{"PACER_AIMD_DECREASE", "0"}, // default 0.8: a 0 is a mistake
		{"PACER_WHATSAPP_PAIR_BURST", "0"},
		{"PACER_AIMD_FLOOR", "0"},
		{"PACER_AIMD_WINDOW", "0s"},
		{"PACER_AIMD_STEP", "-1"},
		{"PACER_FCM_SERVER_RETRY", "-1s"},
		{"PACER_FCM_SLOW_START", "2h"},
		{"PACER_FCM_SLOW_START", "soon"},
		{"PACER_FCM_SLOW_START_IDLE", "10ms"},
		{"PACER_APNS_SERVER_RETRY", "soon"},
		{"PACER_SERVER_ERROR_BURST", "-1"},
		{"PACER_SERVER_ERROR_BURST", "many"},
		{"PACER_SERVER_ERROR_WINDOW", "0s"},
		{"PACER_SERVER_ERROR_DECREASE", "1"},
		{"PACER_SERVER_ERROR_DECREASE", "0"},
		{"PACER_BREAKER_FLOOR_THROTTLES", "0"},
		{"PACER_KAFKA_SESSION_TIMEOUT", "10ms"},
		{"PACER_APNS_RATE", "0"},
		{"PACER_FCM_BURST", "0"},
		{"PACER_SENDGRID_RATE", "x"},
		{"PACER_APNS_BASE_URL", "ftp://x"},
	} {
		t.Run(c.name+"="+c.val, func(t *testing.T) {
			_, err := loadConfig(lookupMap(map[string]string{c.name: c.val}), whatsappRow(t))
			if err == nil || !strings.Contains(err.Error(), c.name) {
				t.Fatalf("error = %v, want one naming %s", err, c.name)
			}
		})
	}
}

// TestRunExitCodes drives main's run: bad settings exit 2 naming the
// variable, and the token never appears in the output.
func TestRunExitCodes(t *testing.T) {
	const secret = "EAAG-very-secret-token"
	// Every case's output must not hold the token.
	runCLICases(t, []cliCase{
		{"no command", nil, nil, 2, "usage", secret},
		{"unknown command", []string{"fly"}, nil, 2, `unknown command "fly"`, secret},
		{"no channel", []string{"run"}, map[string]string{"PACER_WHATSAPP_TOKEN": secret}, 2, "--channel is required", secret},
		{"unknown channel", []string{"run", "--channel", "pigeon"}, map[string]string{"PACER_WHATSAPP_TOKEN": secret}, 2, `unknown channel "pigeon"`, secret},
		{"missing token", []string{"run", "--channel", "whatsapp"}, nil, 2, "PACER_WHATSAPP_TOKEN", secret},
		{"bad rate", []string{"run", "--channel", "whatsapp"}, map[string]string{"PACER_WHATSAPP_TOKEN": secret, "PACER_WHATSAPP_RATE": "0"}, 2, "PACER_WHATSAPP_RATE", secret},
		{"bad metrics addr", []string{"run", "--channel", "whatsapp"}, map[string]string{"PACER_WHATSAPP_TOKEN": secret, "PACER_METRICS_ADDR": "256.0.0.1:99999", "PACER_REDIS_URL": "redis://127.0.0.1:1/0"}, 2, "PACER_METRICS_ADDR", secret},
		{"publish without file", []string{"publish", "--channel", "whatsapp"}, nil, 2, "exactly one FILE", secret},
		{"apns without key", []string{"run", "--channel", "apns"}, map[string]string{"PACER_APNS_KEY_ID": "K", "PACER_APNS_TEAM_ID": "T"}, 2, "PACER_APNS_KEY_FILE", secret},
		{"apns key unreadable", []string{"run", "--channel", "apns"}, map[string]string{"PACER_APNS_KEY_ID": "K", "PACER_APNS_TEAM_ID": "T", "PACER_APNS_KEY_FILE": "/nonexistent/secret-path.p8"}, 2, "PACER_APNS_KEY_FILE", secret},
		{"fcm without credentials", []string{"run", "--channel", "fcm"}, nil, 2, "PACER_FCM_CREDENTIALS_FILE", secret},
		{"fcm credentials not JSON", []string{"run", "--channel", "fcm"}, map[string]string{"PACER_FCM_CREDENTIALS_FILE": "/etc/hostname"}, 2, "PACER_FCM_CREDENTIALS_FILE", secret},
		{"apns short key id", []string{"run", "--channel", "apns"}, map[string]string{"PACER_APNS_KEY_ID": "x", "PACER_APNS_TEAM_ID": "TEAM123456", "PACER_APNS_KEY_FILE": "/etc/hostname"}, 2, "PACER_APNS_", secret},
		{"floor above the channel's rate", []string{"run", "--channel", "whatsapp"}, map[string]string{"PACER_WHATSAPP_TOKEN": secret, "PACER_AIMD_FLOOR": "100", "PACER_METRICS_ADDR": "256.0.0.1:99999", "PACER_REDIS_URL": "redis://127.0.0.1:1/0"}, 2, "PACER_AIMD_FLOOR", secret},
		{"sendgrid bad keys", []string{"run", "--channel", "sendgrid"}, map[string]string{"PACER_SENDGRID_API_KEYS": "main=SG.secret,broken"}, 2, "PACER_SENDGRID_API_KEYS", secret},
	})
}

// TestOpsPathsGetOnly: the ops paths of `pacer run` and `pacer webhook`
// answer GET and HEAD; another method gets a 405 problem+json with Allow.
func TestOpsPathsGetOnly(t *testing.T) {
	h := opsHandler(prometheus.NewRegistry(), func() bool { return true })
	for _, p := range []string{"/metrics", "/healthz", "/readyz"} {
		for _, m := range []string{"GET", "HEAD"} {
			rec := httptest.NewRecorder()
			h.ServeHTTP(rec, httptest.NewRequest(m, p, nil))
			if rec.Code != http.StatusOK {
				t.Errorf("%s %s: %d, want 200", m, p, rec.Code)
			}
		}
		for _, m := range []string{"POST", "DELETE", "PUT"} {
			rec := httptest.NewRecorder()
			h.ServeHTTP(rec, httptest.NewRequest(m, p, strings.NewReader("x")))
			if rec.Code != http.StatusMethodNotAllowed || rec.Header().Get("Allow") != "GET, HEAD" ||
				rec.Header().Get("Content-Type") != "application/problem+json" || !strings.Contains(rec.Body.String(), m+" is not allowed on "+p) {
				t.Errorf("%s %s: %d, Allow %q, %q %q; want 405 problem+json, Allow GET, HEAD", m, p, rec.Code, rec.Header().Get("Allow"),
					rec.Header().Get("Content-Type"), rec.Body)
			}
		}
	}
}

// TestPprofOnlyWhenAsked: the ops server serves Go's profiles only with
// PACER_PPROF (registerPprof), never by default.
func TestPprofOnlyWhenAsked(t *testing.T) {
	get := func(h http.Handler) (int, string) {
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/debug/pprof/", nil))
		return rec.Code, rec.Body.String()
	}
	ready := func() bool { return true }
	if code, _ := get(opsHandler(prometheus.NewRegistry(), ready)); code != http.StatusNotFound {
		t.Errorf("/debug/pprof/ without PACER_PPROF: %d, want 404", code)
	}
	if code, body := get(opsHandler(prometheus.NewRegistry(), ready, registerPprof)); code != http.StatusOK || !strings.Contains(body, "goroutine") {
		t.Errorf("/debug/pprof/ with PACER_PPROF: %d %q, want 200 with the profiles' index", code, body)
	}
	cfg, err := loadConfig(lookupMap(map[string]string{"PACER_PPROF": "true"}), whatsappRow(t))
	if err != nil || !cfg.Pprof {
		t.Errorf("PACER_PPROF=true: Pprof %v, err %v", cfg.Pprof, err)
	}
}

// TestLoadConfigEveryProblemOncePerLine: every bad setting is named even
// when another one would stop a check early (a bad rate used to skip the
// AIMD checks; the AIMD and breaker checks stopped at their first error),
// and a problem is one line, however many checks find it.
func TestLoadConfigEveryProblemOncePerLine(t *testing.T) {
	for _, c := range []struct {
		env  map[string]string
		want []string // the variables named, one line each, in any order
	}{
		{map[string]string{"PACER_AIMD_DECREASE": "2", "PACER_WHATSAPP_RATE": "-1"},
			[]string{"PACER_AIMD_DECREASE", "PACER_WHATSAPP_RATE"}},
		{map[string]string{"PACER_AIMD_DECREASE": "2", "PACER_THROTTLE_COOLDOWN": "-1s", "PACER_HALT_COOLDOWN": "-1s"},
			[]string{"PACER_AIMD_DECREASE", "PACER_THROTTLE_COOLDOWN", "PACER_HALT_COOLDOWN"}},
		{map[string]string{"PACER_AIMD_DECREASE": "2", "PACER_AIMD_WINDOW": "-1s", "PACER_MAX_COOLDOWN": "-1s"},
			[]string{"PACER_AIMD_DECREASE", "PACER_AIMD_WINDOW", "PACER_MAX_COOLDOWN"}},
		{map[string]string{"PACER_HALT_COOLDOWN": "-1s", "PACER_BREAKER_MAX_OPEN": "-1s"},
			[]string{"PACER_HALT_COOLDOWN", "PACER_BREAKER_MAX_OPEN"}},
		{map[string]string{"PACER_SEND_TIMEOUT": "-1s"}, []string{"PACER_SEND_TIMEOUT"}},
		{map[string]string{"PACER_KAFKA_BROKERS": ","}, []string{"PACER_KAFKA_BROKERS"}},
		{map[string]string{"PACER_KAFKA_BROKERS": "a,b"}, []string{"PACER_KAFKA_BROKERS", "PACER_KAFKA_BROKERS"}}, // two entries, two problems
	} {
		_, err := loadConfig(lookupMap(c.env), whatsappRow(t))
		if err == nil {
			t.Errorf("%v: accepted", c.env)
			continue
		}
		var got []string
		for _, l := range strings.Split(err.Error(), "\n") {
			v, _, _ := strings.Cut(l, ":")
			got = append(got, v)
		}
		want := slices.Clone(c.want)
		slices.Sort(got)
		slices.Sort(want)
		if !slices.Equal(got, want) {
			t.Errorf("%v: lines name %v, want %v:\n%v", c.env, got, want, err)
		}
	}
}

// TestConfigProblemsInPlainWords: a rate, AIMD or breaker setting a check
// refuses is reported after its variable without the Go package's prefix.
func TestConfigProblemsInPlainWords(t *testing.T) {
	for _, c := range []struct{ env, val, want string }{
		{"PACER_WHATSAPP_RATE", "-1", "PACER_WHATSAPP_RATE: rate -1 must be > 0"},
		{"PACER_AIMD_DECREASE", "2", "PACER_AIMD_DECREASE: decrease 2 must be"},
		{"PACER_BREAKER_MAX_OPEN", "-1s", "PACER_BREAKER_MAX_OPEN: "},
	} {
		_, err := loadConfig(lookupMap(map[string]string{c.env: c.val}), whatsappRow(t))
		if err == nil || !strings.Contains(err.Error(), c.want) || strings.Contains(err.Error(), "invalid limit") ||
			strings.Contains(err.Error(), "invalid aimd") || strings.Contains(err.Error(), "invalid breaker") {
			t.Errorf("%s=%s: %v; want %q without a package prefix", c.env, c.val, err, c.want)
		}
	}
}

// TestUnparsedRateHidesNothing: a rate or burst that is not a number is
// reported with every other bad setting, as a negative one is (README: a
// bad rate does not hide a bad AIMD or breaker setting).
func TestUnparsedRateHidesNothing(t *testing.T) {
	for _, v := range []string{"PACER_WHATSAPP_RATE", "PACER_WHATSAPP_BURST"} {
		for _, val := range []string{"abc", "-1"} {
			bad := map[string]string{v: val, "PACER_AIMD_DECREASE": "1.5", "PACER_BREAKER_MAX_OPEN": "-1s"}
			_, err := loadConfig(lookupMap(bad), whatsappRow(t))
			if err == nil {
				t.Fatalf("%s=%s: loadConfig accepted it", v, val)
			}
			for name := range bad {
				if !strings.Contains(err.Error(), name+": ") {
					t.Errorf("%s=%s: error does not name %s:\n%v", v, val, name, err)
				}
			}
			if n := strings.Count(err.Error(), "\n") + 1; n != len(bad) {
				t.Errorf("%s=%s: %d problems reported, want %d:\n%v", v, val, n, len(bad), err)
			}
		}
	}
}

// TestRecipientRateZeroIsOff: README documents 0 as the off switch of a
// recipient bucket (PACER_FCM_DEVICE_RATE, PACER_WHATSAPP_PAIR_RATE), even
// where its default is on: the pacer then runs without it.
func TestRecipientRateZeroIsOff(t *testing.T) {
	for _, c := range []struct{ ch, v string }{{"fcm", "PACER_FCM_DEVICE_RATE"}, {"whatsapp", "PACER_WHATSAPP_PAIR_RATE"}} {
		row, err := channelNamed(c.ch)
		if err != nil {
			t.Fatal(err)
		}
		cfg, err := loadConfig(lookupMap(map[string]string{c.v: "0"}), row)
		if err != nil {
			t.Fatalf("%s=0: %v", c.v, err)
		}
		if got := cfg.pacerConfig(row).RecipientLimit; got != (bucket.Limit{}) {
			t.Errorf("%s=0: RecipientLimit = %+v, want none (off)", c.v, got)
		}
		if err := cfg.pacerConfig(row).Validate(); err != nil {
			t.Errorf("%s=0: the pacer refuses it: %v", c.v, err)
		}
	}
}

// TestIngestConfigNamesEveryVariable: `pacer ingest` reports every bad
// variable at once, one line each, naming the variable (not the Go field),
// and blames a bad burst on the burst.
func TestIngestConfigNamesEveryVariable(t *testing.T) {
	bad := map[string]string{
		"PACER_INGEST_IP_RATE": "abc", "PACER_INGEST_IP_BURST": "0", "PACER_INGEST_CHANNEL_RATE": "-1",
		"PACER_INGEST_CHANNEL_BURST": "many", "PACER_INGEST_PRODUCE_TIMEOUT": "5", "PACER_INGEST_PARTITIONS": "0",
		"PACER_INGEST_TRUSTED_PROXIES": "nowhere", "PACER_INGEST_ADDR": "",
	}
	lookup := lookupMap(bad)
	_, _, err := loadIngestConfig(func(k string) (string, bool) {
		if k == "PACER_INGEST_TENANTS" {
			return "tenants.json", true
		}
		return lookup(k)
	})
	if err == nil {
		t.Fatal("loadIngestConfig accepted it")
	}
	lines := strings.Split(err.Error(), "\n")
	for v := range bad {
		n := 0
		for _, l := range lines {
			if strings.HasPrefix(l, v+": ") {
				n++
			}
		}
		if n != 1 {
			t.Errorf("%d lines name %s, want 1:\n%v", n, v, err)
		}
	}
	if len(lines) != len(bad) {
		t.Errorf("%d problems reported, want %d:\n%v", len(lines), len(bad), err)
	}
	for _, field := range []string{"IPBurst", "ProduceTimeout", "strconv.", "time: "} {
		if strings.Contains(err.Error(), field) {
			t.Errorf("error names Go's %q:\n%v", field, err)
		}
	}
}

// TestIngestReportsRunAndIngestSettingsTogether: a bad shared setting
// does not hide a bad ingest one.
func TestIngestReportsRunAndIngestSettingsTogether(t *testing.T) {
	var stderr bytes.Buffer
	code := run(context.Background(), []string{"ingest"}, nil, io.Discard, &stderr,
		lookupMap(map[string]string{"PACER_LOG_FORMAT": "xml", "PACER_INGEST_IP_BURST": "0"}))
	if code != 2 || !strings.Contains(stderr.String(), "PACER_LOG_FORMAT: ") || !strings.Contains(stderr.String(), "PACER_INGEST_IP_BURST: ") ||
		!strings.Contains(stderr.String(), "PACER_INGEST_TENANTS: ") {
		t.Errorf("exit %d, stderr:\n%s", code, stderr.String())
	}
}

// TestCooldownConflictNamesTheVariableSet: a shortest cooldown above the
// longest is blamed on the variable the operator set (both when both).
func TestCooldownConflictNamesTheVariableSet(t *testing.T) {
	for _, c := range []struct {
		env  map[string]string
		want string
	}{
		{map[string]string{"PACER_THROTTLE_COOLDOWN": "2h"}, "PACER_THROTTLE_COOLDOWN: PACER_THROTTLE_COOLDOWN 2h0m0s must be <= PACER_MAX_COOLDOWN 1h0m0s"},
		{map[string]string{"PACER_THROTTLE_COOLDOWN": "10s", "PACER_MAX_COOLDOWN": "5s"},
			"PACER_THROTTLE_COOLDOWN, PACER_MAX_COOLDOWN: PACER_THROTTLE_COOLDOWN 10s must be <= PACER_MAX_COOLDOWN 5s"},
	} {
		_, err := loadConfig(lookupMap(c.env), whatsappRow(t))
		if err == nil || err.Error() != c.want {
			t.Errorf("%v: error = %v, want %q", c.env, err, c.want)
		}
	}
}

// TestMisspelledSettings: a PACER_ variable no command reads but within two
// edits of one that is stops start-up naming both (never its value); the
// settings themselves, their _FILE forms, ingest's, and variables far from
// every setting pass.
func TestMisspelledSettings(t *testing.T) {
	env := []string{
		"PACER_WHATSAP_RATE=20", "PACER_REDIS_PERFIX=secret-ish", "PACER_INGEST_IP_RAT=5", "PACER_REDIS_ULR=redis://r",
		"PACER_WHATSAPP_RATE=20", "PACER_REDIS_PREFIX=p", "PACER_WHATSAPP_TOKEN_FILE=/t", "PACER_INGEST_IP_RATE=5",
		"PACER_APNS_KEY_ID=k", "PACER_KAFKA_SASL_PASSWORD=x", "PACER_CACHE_DIR=/c", "PACER_TEST_REDIS_ADDR=a", "HOME=/root",
	}
	var got []string
	for _, err := range misspelledSettings(env) {
		got = append(got, err.Error())
	}
	want := []string{
		"PACER_WHATSAP_RATE: no such setting; did you mean PACER_WHATSAPP_RATE?",
		"PACER_REDIS_PERFIX: no such setting; did you mean PACER_REDIS_PREFIX?",
		"PACER_INGEST_IP_RAT: no such setting; did you mean PACER_INGEST_IP_RATE?",
		// A swap is one edit: not PACER_REDIS_TLS, two substitutions away.
		"PACER_REDIS_ULR: no such setting; did you mean PACER_REDIS_URL?",
	}
	if !slices.Equal(got, want) {
		t.Errorf("misspelled settings:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
}

// TestListenSettingInUse: a listen address another process holds (a
// second replica on one host meets the first one's default :9464) is
// refused naming the setting and how to pick a free port.
func TestListenSettingInUse(t *testing.T) {
	held, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer held.Close()
	_, err = listenSetting("PACER_METRICS_ADDR", held.Addr().String())
	var ce *configError
	if !errors.As(err, &ce) || ce.Var != "PACER_METRICS_ADDR" || !strings.Contains(err.Error(), "is in use") ||
		!strings.Contains(err.Error(), "127.0.0.1:0 to pick one") {
		t.Errorf("listen on a held address: %v; want a configError of PACER_METRICS_ADDR saying it is in use and how to pick a free port", err)
	}
	ln, err := listenSetting("PACER_METRICS_ADDR", "127.0.0.1:0")
	if err != nil {
		t.Fatalf("a free port: %v", err)
	}
	ln.Close()
}

// TestServerErrorSettings: the server-error cut reaches the pacer's AIMD
// as set (20 in 10s, x0.9 by default), and PACER_SERVER_ERROR_BURST=0
// turns it off.
func TestServerErrorSettings(t *testing.T) {
	for _, c := range []struct {
		env  map[string]string
		want adapt.AIMD
	}{
		{nil, adapt.AIMD{ServerErrors: 20, ServerErrorWindow: 10 * time.Second, ServerErrorDecrease: 0.9}},
		{map[string]string{"PACER_SERVER_ERROR_BURST": "5", "PACER_SERVER_ERROR_WINDOW": "1m", "PACER_SERVER_ERROR_DECREASE": "0.5"},
			adapt.AIMD{ServerErrors: 5, ServerErrorWindow: time.Minute, ServerErrorDecrease: 0.5}},
		{map[string]string{"PACER_SERVER_ERROR_BURST": "0"}, adapt.AIMD{ServerErrors: -1, ServerErrorWindow: 10 * time.Second, ServerErrorDecrease: 0.9}},
	} {
		env := map[string]string{"PACER_WHATSAPP_TOKEN": "t"}
		maps.Copy(env, c.env)
		ch := whatsappRow(t)
		cfg, err := loadConfig(lookupMap(env), ch)
		if err != nil {
			t.Fatalf("%v: %v", c.env, err)
		}
		a := cfg.pacerConfig(ch).AIMD
		if a.ServerErrors != c.want.ServerErrors || a.ServerErrorWindow != c.want.ServerErrorWindow || a.ServerErrorDecrease != c.want.ServerErrorDecrease {
			t.Errorf("%v: AIMD %+v; want server errors %d in %v, x%v", c.env, a, c.want.ServerErrors, c.want.ServerErrorWindow, c.want.ServerErrorDecrease)
		}
	}
}

// TestServerRetrySettings: each channel's least delay before a 5xx is
// retried reaches the pacer: what its provider asks for by default (FCM
// 10 s; APNs 5 min, the longest retry tier, where Apple asks for 15; none
// for WhatsApp and SendGrid), or what is set.
func TestServerRetrySettings(t *testing.T) {
	want := map[string]time.Duration{"whatsapp": 0, "apns": 5 * time.Minute, "fcm": 10 * time.Second, "sendgrid": 0}
	cfg, err := loadConfig(lookupMap(map[string]string{"PACER_WHATSAPP_TOKEN": "t"}), whatsappRow(t))
	if err != nil {
		t.Fatal(err)
	}
	for i := range channelTable {
		ch := &channelTable[i]
		if got := cfg.pacerConfig(ch).ServerRetry; got != want[ch.name] {
			t.Errorf("%s: ServerRetry %v by default, want %v", ch.name, got, want[ch.name])
		}
	}
	cfg, err = loadConfig(lookupMap(map[string]string{"PACER_WHATSAPP_TOKEN": "t", "PACER_WHATSAPP_SERVER_RETRY": "30s"}), whatsappRow(t))
	if err != nil {
		t.Fatal(err)
	}
	if got := cfg.pacerConfig(whatsappRow(t)).ServerRetry; got != 30*time.Second {
		t.Errorf("PACER_WHATSAPP_SERVER_RETRY=30s: ServerRetry %v", got)
	}
}

// TestServerRetryNeedsTheLedger: a server error's retry holds back its
// partition's commit like a retry tier's, so the ledger must remember the
// records behind it that long: Apple's 15 minutes with the default
// PACER_LEDGER_TTL (7m) stops start-up naming PACER_LEDGER_TTL; 19m
// (1.2 x 15m + 1m) is enough. Each channel's default starts.
func TestServerRetryNeedsTheLedger(t *testing.T) {
	apnsRow := channelRow(t, "apns")
	for _, ch := range channelTable {
		cfg, err := loadConfig(lookupMap(nil), &ch)
		if err == nil {
			err = cfg.pacerConfig(&ch).Validate()
		}
		if err != nil {
			t.Errorf("%s with its default server retry: %v", ch.name, err)
		}
	}
	cfg, err := loadConfig(lookupMap(map[string]string{"PACER_APNS_SERVER_RETRY": "15m"}), apnsRow)
	if err == nil {
		err = cfg.pacerConfig(apnsRow).Validate()
	}
	if err == nil || !strings.Contains(err.Error(), "PACER_LEDGER_TTL") && !strings.Contains(err.Error(), "IdempotencyTTL") {
		t.Errorf("PACER_APNS_SERVER_RETRY=15m with PACER_LEDGER_TTL 7m: %v; want an error naming PACER_LEDGER_TTL", err)
	}
	cfg, err = loadConfig(lookupMap(map[string]string{"PACER_APNS_SERVER_RETRY": "15m", "PACER_LEDGER_TTL": "19m"}), apnsRow)
	if err == nil {
		err = cfg.pacerConfig(apnsRow).Validate()
	}
	if err != nil {
		t.Errorf("PACER_APNS_SERVER_RETRY=15m with PACER_LEDGER_TTL=19m: %v", err)
	}
}

// TestSlowStartSettings: FCM projects back from idle ramp over 60 s after
// 5 minutes idle by default, as set, or not at all (0s); other channels
// have no slow start.
func TestSlowStartSettings(t *testing.T) {
	fcmRow := func() *channel {
		for i := range channelTable {
			if channelTable[i].name == "fcm" {
				return &channelTable[i]
			}
		}
		t.Fatal("no fcm row")
		return nil
	}
	for _, c := range []struct {
		env  map[string]string
		want adapt.SlowStart
	}{
		{nil, adapt.SlowStart{Ramp: time.Minute, Idle: 5 * time.Minute}},
		{map[string]string{"PACER_FCM_SLOW_START": "2m", "PACER_FCM_SLOW_START_IDLE": "30s"}, adapt.SlowStart{Ramp: 2 * time.Minute, Idle: 30 * time.Second}},
		{map[string]string{"PACER_FCM_SLOW_START": "0s"}, adapt.SlowStart{Idle: 5 * time.Minute}},
	} {
		env := map[string]string{"PACER_WHATSAPP_TOKEN": "t"}
		maps.Copy(env, c.env)
		cfg, err := loadConfig(lookupMap(env), whatsappRow(t))
		if err != nil {
			t.Fatalf("%v: %v", c.env, err)
		}
		if got := cfg.pacerConfig(fcmRow()).SlowStart; got != c.want {
			t.Errorf("%v: fcm slow start %+v, want %+v", c.env, got, c.want)
		}
		if got := cfg.pacerConfig(whatsappRow(t)).SlowStart; got != (adapt.SlowStart{}) {
			t.Errorf("whatsapp slow start %+v, want none", got)
		}
	}
}
