package main

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/pacerhq/pacer/internal/testenv"
	"github.com/pacerhq/pacer/pacer/produce"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
)

// TestCLIMessages drives main's run through the operator mistakes that
// used to read as Go internals, doubled prefixes or wrong causes: each
// answers in words, naming the variable or argument, with the documented
// exit status, and never echoes a password.
func TestCLIMessages(t *testing.T) {
	dir := t.TempDir()
	file := filepath.Join(dir, "c.jsonl")
	if err := os.WriteFile(file, []byte(`{"id":"a","key":"k","to":"t"}`+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	down := map[string]string{"PACER_REDIS_URL": "redis://:hunter2@127.0.0.1:1/0", "PACER_KAFKA_BROKERS": "127.0.0.1:1"}
	runCLICases(t, []cliCase{
		{"number", []string{"status", "--channel", "whatsapp"}, map[string]string{"PACER_AIMD_DECREASE": "abc"}, 2,
			`PACER_AIMD_DECREASE: "abc" is not a number`, "strconv"},
		{"whole number", []string{"status", "--channel", "whatsapp"}, map[string]string{"PACER_INFLIGHT": "1.5"}, 2,
			`PACER_INFLIGHT: "1.5" is not a whole number`, "strconv"},
		{"duration without unit", []string{"status", "--channel", "whatsapp"}, map[string]string{"PACER_DRAIN": "5"}, 2,
			`PACER_DRAIN: "5" has no unit`, "time:"},
		{"redis port", []string{"status", "--channel", "whatsapp"}, map[string]string{"PACER_REDIS_URL": "redis://:hunter2@127.0.0.1:abc/0"}, 2,
			"PACER_REDIS_URL: the port is not a number", "hunter2"},
		{"redis database", []string{"status", "--channel", "whatsapp"}, map[string]string{"PACER_REDIS_URL": "redis://127.0.0.1:1/x"}, 2,
			"PACER_REDIS_URL: host, port or database is not valid", "scheme"},
		{"flags after the file", []string{"publish", file, "--channel", "whatsapp", "--topic", "t"}, down, 1,
			"topic t", "--channel is required"},
		{"kafka down", []string{"publish", "--channel", "whatsapp", file}, down, 1,
			"connection refused (PACER_KAFKA_BROKERS=127.0.0.1:1)", "hunter2"},
		{"missing file", []string{"publish", "--channel", "whatsapp", filepath.Join(dir, "none.jsonl")}, nil, 2,
			"cannot open", ""},
		{"directory", []string{"publish", "--channel", "whatsapp", dir}, nil, 2, "is a directory", ""},
		{"one prefix", []string{"dlq", "replay", "--channel", "whatsapp", "--topic", "x"}, down, 1,
			"pacer: topic x", "pacer: pacer:"},
		{"dlq replay, kafka down", []string{"dlq", "replay", "--channel", "whatsapp", "--topic", "x"}, down, 1,
			"(PACER_KAFKA_BROKERS=127.0.0.1:1)", "hunter2"},
		{"status without redis", []string{"status", "--channel", "whatsapp"}, down, 1,
			"cannot read Redis (PACER_REDIS_URL host 127.0.0.1:1)", "hunter2"},
		{"stray argument", []string{"status", "--channel", "whatsapp", "extra"}, nil, 2,
			`pacer: status: unexpected argument "extra"`, "pacer: pacer"},
		// An explicitly empty flag (an unset shell variable) is refused,
		// never read as the production default topic or group.
		{"empty topic", []string{"run", "--channel", "whatsapp", "--topic", ""}, down, 2, "run: --topic given but empty", ""},
		{"empty group", []string{"run", "--channel", "whatsapp", "--group="}, down, 2, "run: --group given but empty", ""},
		{"empty publish topic", []string{"publish", "--channel", "whatsapp", "--topic", "", file}, down, 2, "publish: --topic given but empty", ""},
		{"empty dlq flags", []string{"dlq", "replay", "--channel", "whatsapp", "--topic", "", "--reason", "", "--campaign", ""}, down, 2,
			"dlq replay: --campaign, --reason, --topic given but empty", ""},
		{"empty status key", []string{"status", "--channel", "whatsapp", "--key", ""}, down, 2, "status: --key given but empty", ""},
		// A name Kafka refuses is the flag's fault, not an outage to retry.
		{"bad run topic", []string{"run", "--channel", "whatsapp", "--topic", "nc bad!"}, down, 2,
			`--topic "nc bad!": Kafka topic names take only ASCII letters, digits, '.', '_' and '-'`, ""},
		{"bad publish topic", []string{"publish", "--channel", "whatsapp", "--topic", "..", file}, down, 2, `--topic "..": not a Kafka topic name`, ""},
		{"long dlq topic", []string{"dlq", "replay", "--channel", "whatsapp", "--topic", strings.Repeat("t", 241), "--reason", "malformed"}, down, 2,
			"--topic: 241 characters, at most 240", ""},
		// The live-control commands name the command and the setting when
		// Redis is down, never its password; a bad setting is bad usage.
		{"limit with redis down", []string{"limit", "get", "--channel", "whatsapp"}, down, 1,
			"pacer: limit get: cannot reach Redis (PACER_REDIS_URL host 127.0.0.1:1): ", "hunter2"},
		{"campaign with redis down", []string{"campaign", "status", "--channel", "whatsapp", "--campaign", "x"}, down, 1,
			"pacer: campaign status: cannot reach Redis (PACER_REDIS_URL host 127.0.0.1:1): ", "hunter2"},
		{"limit with a bad setting", []string{"limit", "get", "--channel", "whatsapp"}, map[string]string{"PACER_WHATSAPP_RATE": "abc"}, 2,
			`pacer: invalid configuration: PACER_WHATSAPP_RATE: "abc" is not a number`, "limit get"},
		{"version", []string{"version"}, nil, 0, "pacer ", ""},
		// Refused before the demo runs (the demo would print its table first).
		{"demo report path", []string{"demo", "-report", filepath.Join(dir, "none", "x.json")}, nil, 2,
			"demo: -report: open", "delivered"},
		// A reason no record can carry is refused before Kafka is read.
		{"dlq reason", []string{"dlq", "replay", "--channel", "whatsapp", "--reason", "nonsense"}, down, 2,
			`--reason: reason "nonsense" is not a DLQ reason: malformed, expired, permanent`, ""},
		{"dlq empty code", []string{"dlq", "replay", "--channel", "whatsapp", "--reason", "permanent:"}, down, 2,
			"permanent:<provider code>", ""},
		{"dlq permanent code", []string{"dlq", "replay", "--channel", "whatsapp", "--reason", "permanent:131026", "--topic", "x"}, down, 1,
			"pacer: topic x", "--reason"},
		{"run -h lists the settings", []string{"run", "--channel", "whatsapp", "-h"}, nil, 0,
			"PACER_WHATSAPP_PAIR_BURST", ""},
	})
}

// cliCase is one call of main's run: its arguments and settings, the exit
// status it must end with, text its output (stdout and stderr) must hold
// and, unless "", text it must not (a password, a doubled prefix).
type cliCase struct {
	name    string
	args    []string
	env     map[string]string
	code    int
	want    string
	notWant string
}

// runCLICases runs each case as a subtest, with no standard input.
func runCLICases(t *testing.T, cases []cliCase) {
	t.Helper()
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			var out, errb bytes.Buffer
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			code := run(ctx, c.args, strings.NewReader(""), &out, &errb, lookupMap(c.env))
			all := out.String() + errb.String()
			if code != c.code || !strings.Contains(all, c.want) || (c.notWant != "" && strings.Contains(all, c.notWant)) {
				t.Fatalf("exit %d, output %q; want exit %d with %q and without %q", code, all, c.code, c.want, c.notWant)
			}
		})
	}
}

// With Redis down, status prints nothing but the error: no header above
// it, no client log lines.
func TestStatusWithRedisDownPrintsOnlyTheError(t *testing.T) {
	var out, errb bytes.Buffer
	code := run(context.Background(), []string{"status", "--channel", "whatsapp"}, strings.NewReader(""), &out, &errb,
		lookupMap(map[string]string{"PACER_REDIS_URL": "redis://127.0.0.1:1/0"}))
	if code != 1 || out.Len() != 0 || strings.Count(strings.TrimSpace(errb.String()), "\n") != 0 {
		t.Fatalf("exit %d, stdout %q, stderr %q; want exit 1, nothing on stdout, one error line", code, out.String(), errb.String())
	}
}

// TestHelp: -h on a command prints its usage and exits 0; `pacer ingest -h`
// lists every setting it reads with its unit and default.
func TestHelp(t *testing.T) {
	help := func(args ...string) (int, string) {
		var out, errb bytes.Buffer
		code := run(context.Background(), args, strings.NewReader(""), &out, &errb, lookupMap(nil))
		return code, out.String() + errb.String()
	}
	code, out := help("ingest", "-h")
	if code != 0 || !strings.Contains(out, "usage: pacer ingest") {
		t.Fatalf("ingest -h: exit %d, %q", code, out)
	}
	for _, row := range [][3]string{
		{"PACER_INGEST_ADDR", "host:port", ":8080"},
		{"PACER_INGEST_TENANTS", "path", "(none)"},
		{"PACER_INGEST_IP_RATE", "requests/s", "100"},
		{"PACER_INGEST_IP_BURST", "requests", "200"},
		{"PACER_INGEST_CHANNEL_RATE", "messages/s", "10000"},
		{"PACER_INGEST_CHANNEL_BURST", "messages", "10000"},
		{"PACER_INGEST_TRUSTED_PROXIES", "CIDRs", "(none)"},
		{"PACER_INGEST_PRODUCE_TIMEOUT", "duration", "10s"},
		{"PACER_INGEST_PARTITIONS", "partitions", "12"},
		{"PACER_KAFKA_BROKERS", "host:port,...", "127.0.0.1:9092"},
		{"PACER_REDIS_URL", "URL", "redis://127.0.0.1:6379/0"},
		{"PACER_REDIS_FAILURE", "closed|local", "closed"},
		{"PACER_EXPECTED_REPLICAS", "replicas", "1"},
		{"PACER_IDEMPOTENCY_TTL", "duration", "24h"},
		{"PACER_DRAIN", "duration", "30s"},
		{"PACER_LOG_LEVEL", "debug|info|warn|error", "info"},
	} {
		re := regexp.MustCompile(`(?m)^  ` + regexp.QuoteMeta(row[0]) + ` +` + regexp.QuoteMeta(row[1]) + ` +` + regexp.QuoteMeta(row[2]) + `( |$)`)
		if !re.MatchString(out) {
			t.Errorf("ingest -h has no row %q with unit %q and default %q:\n%s", row[0], row[1], row[2], out)
		}
	}
	// Settings ingest does not read are not listed.
	for _, v := range []string{"PACER_AIMD_DECREASE", "PACER_INFLIGHT", "PACER_METRICS_ADDR"} {
		if strings.Contains(out, v) {
			t.Errorf("ingest -h lists %s, which ingest does not read", v)
		}
	}
	for _, args := range [][]string{{"fake-provider", "-h"}, {"fake-provider", "--help"}, {"fake-provider", "whatsapp", "-h"}} {
		code, out := help(args...)
		if code != 0 || !strings.Contains(out, "usage: pacer fake-provider --channel C") || strings.Contains(out, "pacer: ") {
			t.Errorf("%v: exit %d, %q; want exit 0 with the usage and no error", args, code, out)
		}
	}
	// A command made of subcommands lists each on a line of its own.
	for cmd, verbs := range map[string][]string{"limit": {"set", "get", "unset"}, "campaign": {"pause", "resume", "cancel", "status"}, "dlq": {"replay"}} {
		for _, h := range []string{"-h", "--help", "help"} {
			code, out := help(cmd, h)
			if code != 0 || strings.Contains(out, "pacer: ") || !strings.Contains(out, "usage: pacer "+cmd) {
				t.Errorf("%s %s: exit %d, %q; want exit 0 with the usage and no error", cmd, h, code, out)
			}
			for _, v := range verbs {
				if !regexp.MustCompile(`(?m)^  ` + v + ` +\S`).MatchString(out) {
					t.Errorf("%s %s: no line for subcommand %s:\n%s", cmd, h, v, out)
				}
			}
		}
		if code, _ := help(cmd); code != 2 {
			t.Errorf("%s without a subcommand: exit %d, want 2", cmd, code)
		}
	}
}

// TestUnknownFlagNamedOnce: a flag a command does not define, or a value
// a flag cannot take, is named once, on one line naming the command and
// where its flags are listed (exit status 2), without the command's usage
// (fake-provider's runs to 60 lines); -h still prints the usage alone
// (exit status 0).
func TestUnknownFlagNamedOnce(t *testing.T) {
	for _, c := range []refusal{
		{[]string{"run", "--chanel", "whatsapp"}, `run: unknown flag --chanel; "pacer run -h" lists the flags`},
		{[]string{"publish", "--chanel", "whatsapp", "f.jsonl"}, `publish: unknown flag --chanel; "pacer publish -h" lists the flags`},
		{[]string{"status", "--chanel", "whatsapp"}, `status: unknown flag --chanel; "pacer status -h" lists the flags`},
		{[]string{"limit", "set", "--chanel", "whatsapp"}, `limit set: unknown flag --chanel; "pacer limit set -h" lists the flags`},
		{[]string{"demo", "--chanel"}, `demo: unknown flag --chanel; "pacer demo -h" lists the flags`},
		{[]string{"fake-provider", "--channel", "whatsapp", "--rate", "abc"}, `fake-provider: --rate "abc": not a number; "pacer fake-provider -h" lists the flags`},
		{[]string{"fake-provider", "apns", "--device-burst", "1.5"}, `fake-provider: --device-burst "1.5": not a whole number; "pacer fake-provider -h" lists the flags`},
		{[]string{"fake-provider", "whatsapp", "--account-window", "5"}, `fake-provider: --account-window "5": not a duration (such as 10s or 1m); "pacer fake-provider -h" lists the flags`},
		{[]string{"fake-provider", "whatsapp", "--rate"}, `fake-provider: --rate needs a value; "pacer fake-provider -h" lists the flags`},
		{[]string{"demo", "-v=maybe"}, `demo: -v "maybe": not true or false; "pacer demo -h" lists the flags`},
		// A channel's flag before any channel: the channel is what is missing.
		{[]string{"fake-provider", "--rate", "abc"}, `fake-provider: --channel is required (` + channelList() + `); "pacer fake-provider -h" lists the flags`},
		{[]string{"fake-provider", "sms"}, `fake-provider: unknown channel "sms" (` + channelList() + `); "pacer fake-provider -h" lists the flags`},
	} {
		var out, errb bytes.Buffer
		code := run(context.Background(), c.args, strings.NewReader(""), &out, &errb, lookupMap(nil))
		text := out.String() + errb.String()
		if code != 2 || text != "pacer: "+c.want+"\n" {
			t.Errorf("%v: exit %d, output\n%s\nwant exit 2 and the one line %q", c.args, code, text, "pacer: "+c.want)
		}
	}
	var out, errb bytes.Buffer
	if code := run(context.Background(), []string{"run", "-h"}, strings.NewReader(""), &out, &errb, lookupMap(nil)); code != 0 ||
		strings.Count(out.String()+errb.String(), "usage: pacer run") != 1 {
		t.Errorf("run -h: exit %d, want 0 and the usage once:\n%s%s", code, out.String(), errb.String())
	}
}

// TestLimitSetRefusesBadValues: invalid values are refused before Redis is
// touched, with exit status 2 and the flag named.
func TestLimitSetRefusesBadValues(t *testing.T) {
	for _, c := range []refusal{
		{[]string{"--rate", "0"}, "--rate"},
		{[]string{"--rate", "-5"}, "--rate"},
		{[]string{"--rate", "fast"}, "--rate"},
		{[]string{"--rate", "NaN"}, "--rate"},
		{[]string{"--rate", "10", "--burst", "0"}, "--burst"},
		{[]string{"--rate", "10", "--burst", "2.5"}, "--burst"},
		{[]string{"--rate", "0.0001", "--burst", "1000000000"}, "--burst"},
		{[]string{"--rate", "1e-9"}, "--rate"},                    // below one a day
		{[]string{"--rate", "0.00001", "--burst", "1"}, "--rate"}, // 0.86 a day
		// Above the highest ceiling a pacer accepts (1e9 msgs/s): a pacer
		// would refuse it and keep the key's last limit.
		{[]string{"--rate", "1e308"}, "--rate"},
		{[]string{"--rate", "1e12"}, "--rate"},
		{[]string{"--rate", "5e9", "--burst", "10"}, "--rate"},
		{[]string{"--burst", "10"}, "--rate is required"},
	} {
		args := append([]string{"limit", "set", "--channel", "whatsapp", "--key", "106"}, c.args...)
		code, _, errs := runCLI(nil, args...)
		if code != 2 || !strings.Contains(errs, c.want) {
			t.Errorf("pacer %v: exit %d, stderr %q; want 2 naming %s", args, code, errs, c.want)
		}
		if r, _ := strconv.ParseFloat(c.args[1], 64); c.args[0] == "--rate" && r > 1e9 && !strings.Contains(errs, "1e+09") {
			t.Errorf("pacer %v: stderr %q does not name the highest rate accepted, 1e+09 msgs/s", args, errs)
		}
	}
}

// TestDLQReplayMissingTopic: replaying a topic that has no DLQ says so in
// one line naming the DLQ topic, prints no "replayed 0" summary, and
// creates no topic.
func TestDLQReplayMissingTopic(t *testing.T) {
	brokers := testenv.KafkaBrokers(t)
	topic := fmt.Sprintf("missing%d", time.Now().UnixNano())
	var out, errb bytes.Buffer
	code := run(context.Background(), []string{"dlq", "replay", "--channel", "whatsapp", "--topic", topic}, strings.NewReader(""), &out, &errb,
		lookupMap(map[string]string{"PACER_KAFKA_BROKERS": brokers}))
	want := "pacer: dlq replay: DLQ topic " + topic + ".dlq does not exist"
	if code != 1 || out.Len() != 0 || strings.Count(errb.String(), "\n") != 1 || !strings.HasPrefix(errb.String(), want) {
		t.Fatalf("exit %d, stdout %q, stderr %q; want exit 1, nothing on stdout, one line starting %q", code, out.String(), errb.String(), want)
	}
	cl, err := kgo.NewClient(kgo.SeedBrokers(strings.Split(brokers, ",")...))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	for _, tp := range []string{topic, topic + ".dlq"} {
		if n, err := produce.TopicPartitions(context.Background(), cl, tp); err != nil || n != 0 {
			t.Errorf("topic %s: %d partitions (%v) after the refused replay, want none", tp, n, err)
		}
	}
}

// TestFakeProviderRefusesNegativeLimits: a negative limit is refused with
// exit status 2 naming the flag, before anything listens.
func TestFakeProviderRefusesNegativeLimits(t *testing.T) {
	for _, c := range [][2]string{{"--rate", "-1"}, {"--burst", "-5"}, {"--pair-rate", "-1"}, {"--pair-burst", "-2"},
		{"--account-limit", "-3"}, {"--rate", "NaN"}, {"--account-window", "0s"}} {
		// A fake that starts anyway is stopped after a while, and fails.
		ctx, cancel := context.WithTimeout(t.Context(), 3*time.Second)
		var outb, errb bytes.Buffer
		code := run(ctx, []string{"fake-provider", "whatsapp", "--addr", "127.0.0.1:0", c[0], c[1]}, strings.NewReader(""), &outb, &errb, lookupMap(nil))
		cancel()
		out, errs := outb.String(), errb.String()
		if code != 2 || !strings.Contains(errs, c[0]+" ") || strings.Contains(out, "listening") {
			t.Errorf("fake-provider %s %s: exit %d, stdout %q, stderr %q; want exit 2 naming %s", c[0], c[1], code, out, errs, c[0])
		}
	}
}

// TestDLQReplayDryRunLists: --dry-run prints one line per record a replay
// would write (the record key it writes, envelope id, campaign, reason, and
// the envelope's key where it differs; a name with control characters
// Go-quoted; an id chosen twice listed once), then the
// summary, and writes nothing to the main topic.
func TestDLQReplayDryRunLists(t *testing.T) {
	brokers := testenv.KafkaBrokers(t)
	topic := fmt.Sprintf("dryrun%d", time.Now().UnixNano())
	cl, err := kgo.NewClient(kgo.SeedBrokers(strings.Split(brokers, ",")...), kgo.DefaultProduceTopic(topic+".dlq"))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	ctx := t.Context()
	if _, err := produce.EnsureTopic(ctx, cl, topic+".dlq", 1); err != nil {
		t.Fatal(err)
	}
	rec := func(key, value, reason string) *kgo.Record {
		return &kgo.Record{Key: []byte(key), Value: []byte(value), Headers: []kgo.RecordHeader{{Key: "pacer-reason", Value: []byte(reason)}}}
	}
	if err := cl.ProduceSync(ctx,
		rec("106", `{"id":"a1","key":"106","to":"1555","campaign":"spring"}`, "cancelled"),
		rec("107", `{"id":"b2","key":"107","to":"1555","campaign":"x\u001b[2Jy"}`, "permanent:131026"),
		rec("106", `{"id":"a1","key":"106","to":"1555","campaign":"spring"}`, "unknown-outcome"),
		rec("108", `{"id":"c3","key":"108","to":"1555"}`, "expired"),
		rec("109", `not json`, "malformed"),
		rec("700000000000000", `{"id":"d4","key":"800000000000000","to":"1555"}`, "malformed"),
		rec("", `{"id":"e5","key":"110","to":"1555"}`, "expired"),
	).FirstErr(); err != nil {
		t.Fatal(err)
	}
	var out, errb bytes.Buffer
	code := run(ctx, []string{"dlq", "replay", "--channel", "whatsapp", "--topic", topic, "--dry-run"}, strings.NewReader(""), &out, &errb,
		lookupMap(map[string]string{"PACER_KAFKA_BROKERS": brokers}))
	want := `would write key 106 id a1 campaign spring reason cancelled
would write key 107 id b2 campaign "x\x1b[2Jy" reason permanent:131026
would write key 108 id c3 campaign - reason expired
would write key 109 id - (value is not an envelope) campaign - reason malformed
would write key 700000000000000 id d4 campaign - reason malformed (envelope key 800000000000000 differs: dead-lettered again as malformed)
would write key - id e5 campaign - reason expired (paced by the envelope key 110)
would replay 6 of 7 DLQ records to ` + topic + `
  1 more chosen were copies of an envelope id replayed once
`
	if code != 0 || !strings.HasPrefix(out.String(), want) {
		t.Fatalf("exit %d, stdout:\n%s\nstderr %q; want exit 0 and stdout starting:\n%s", code, out.String(), errb.String(), want)
	}
	if n := strings.Count(out.String(), "\n"); n != strings.Count(want, "\n")+4 { // and one line per reason
		t.Errorf("stdout has %d lines, want the records, the summary and 4 reasons:\n%s", n, out.String())
	}
	// --key: the record key, or the envelope's for a record without one.
	for key, want := range map[string]string{"106": "would write key 106 id a1 campaign spring reason cancelled\nwould replay 1 of 7",
		"110": "would write key - id e5 campaign - reason expired (paced by the envelope key 110)\nwould replay 1 of 7"} {
		var kout bytes.Buffer
		code := run(ctx, []string{"dlq", "replay", "--channel", "whatsapp", "--topic", topic, "--dry-run", "--key", key}, strings.NewReader(""), &kout, &errb,
			lookupMap(map[string]string{"PACER_KAFKA_BROKERS": brokers}))
		if code != 0 || !strings.HasPrefix(kout.String(), want) {
			t.Errorf("--key %s: exit %d, stdout:\n%s\nwant it starting:\n%s", key, code, kout.String(), want)
		}
	}
	ends, err := kadm.NewClient(cl).ListEndOffsets(ctx, topic)
	if err != nil {
		t.Fatal(err)
	}
	ends.Each(func(o kadm.ListedOffset) {
		if o.Offset != 0 {
			t.Errorf("dry run wrote %d records to %s partition %d", o.Offset, topic, o.Partition)
		}
	})
	// The replay itself writes exactly the keys the dry run listed.
	var wantKeys []string
	for _, l := range strings.Split(out.String(), "\n") {
		if f := strings.Fields(l); len(f) > 3 && f[0] == "would" && f[1] == "write" {
			k := f[3]
			if k == "-" {
				k = ""
			}
			wantKeys = append(wantKeys, k)
		}
	}
	out.Reset()
	if code := run(ctx, []string{"dlq", "replay", "--channel", "whatsapp", "--topic", topic}, strings.NewReader(""), &out, &errb,
		lookupMap(map[string]string{"PACER_KAFKA_BROKERS": brokers})); code != 0 {
		t.Fatalf("replay: exit %d, stderr %q", code, errb.String())
	}
	var gotKeys []string
	for _, r := range consumeAll(t, brokers, topic, len(wantKeys)) {
		gotKeys = append(gotKeys, string(r.Key))
	}
	slices.Sort(gotKeys)
	slices.Sort(wantKeys)
	if !slices.Equal(gotKeys, wantKeys) {
		t.Errorf("replay wrote keys %q, the dry run listed %q", gotKeys, wantKeys)
	}
}

// TestRedisDatabaseOutOfRange: a database number the server does not have
// is a setting to fix, not an outage to wait out: status (and run) stop at
// once naming PACER_REDIS_URL.
func TestRedisDatabaseOutOfRange(t *testing.T) {
	env := map[string]string{"PACER_REDIS_URL": "redis://" + testenv.RedisAddr(t) + "/99"}
	code, out, errs := runCLI(env, "status", "--channel", "whatsapp")
	if code != 1 || out != "" || !strings.Contains(errs, "the database number in PACER_REDIS_URL is beyond the server's databases") {
		t.Errorf("database 99: exit %d, stdout %q, stderr %q; want 1 naming PACER_REDIS_URL's database", code, out, errs)
	}
}

// TestPublishRedisRefusedPublishesNothing: Redis refusing publish's
// credentials (where it records the campaigns' published counts) is a
// setting to fix: publish stops before anything reaches Kafka (here a
// broker that is not there, which publish never gets to), exit 1, naming
// the settings and never the password. A Redis that is down only warns:
// the records are published all the same (here Kafka is not there
// either, so publish fails on Kafka, after the warning).
func TestPublishRedisRefusedPublishesNothing(t *testing.T) {
	file := filepath.Join(t.TempDir(), "c.jsonl")
	if err := os.WriteFile(file, []byte(`{"id":"a","key":"k","to":"t","campaign":"c"}`+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	env := map[string]string{
		"PACER_REDIS_URL":     "redis://nouser:hunter2@" + testenv.RedisAddr(t) + "/0",
		"PACER_KAFKA_BROKERS": "127.0.0.1:1",
	}
	code, out, errs := runCLI(env, "publish", "--channel", "whatsapp", file)
	if code != 1 || out != "" || !strings.Contains(errs, "authentication failed") || !strings.Contains(errs, "nothing published") ||
		strings.Contains(errs, "hunter2") || strings.Contains(errs, "127.0.0.1:1") {
		t.Errorf("wrong Redis password: exit %d, stdout %q, stderr %q; want 1, nothing published, no password", code, out, errs)
	}
	env["PACER_REDIS_URL"] = "redis://127.0.0.1:1/0"
	code, _, errs = runCLI(env, "publish", "--channel", "whatsapp", file)
	if code != 1 || !strings.Contains(errs, "Redis not reachable") || !strings.Contains(errs, "publishing anyway") {
		t.Errorf("Redis down: exit %d, stderr %q; want the warning, then Kafka's failure", code, errs)
	}
}
