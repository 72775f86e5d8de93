package main

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
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
	for _, c := range []struct {
		name    string
		args    []string
		env     map[string]string
		code    int
		want    string
		notWant string
	}{
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
		{"missing file", []string{"publish", "--channel", "whatsapp", filepath.Join(dir, "none.jsonl")}, nil, 2,
			"cannot open", ""},
		{"directory", []string{"publish", "--channel", "whatsapp", dir}, nil, 2, "is a directory", ""},
		{"one prefix", []string{"dlq", "replay", "--channel", "whatsapp", "--topic", "x"}, down, 1,
			"pacer: topic x", "pacer: pacer:"},
		{"status without redis", []string{"status", "--channel", "whatsapp"}, down, 1,
			"cannot read Redis (PACER_REDIS_URL host 127.0.0.1:1)", "hunter2"},
		{"stray argument", []string{"status", "--channel", "whatsapp", "extra"}, nil, 2,
			`pacer: status: unexpected argument "extra"`, "pacer: pacer"},
		{"version", []string{"version"}, nil, 0, "pacer ", ""},
		{"run -h lists the settings", []string{"run", "--channel", "whatsapp", "-h"}, nil, 0,
			"PACER_WHATSAPP_PAIR_BURST", ""},
	} {
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
