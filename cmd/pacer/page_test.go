package main

import (
	"net"
	"testing"
)

// TestRunPageSettings: the status page's settings of `pacer run`: a bad
// listen address or credential file exits 2 naming the variable, and a
// token written into a credentials file (instead of its SHA-256) is never
// printed.
func TestRunPageSettings(t *testing.T) {
	const token = "a-page-token-written-in-the-file"
	base := func(kv ...string) map[string]string {
		env := map[string]string{"PACER_WHATSAPP_TOKEN": "t", "PACER_METRICS_ADDR": "127.0.0.1:0", "PACER_REDIS_URL": "redis://127.0.0.1:1/0"}
		for i := 0; i < len(kv); i += 2 {
			env[kv[i]] = kv[i+1]
		}
		return env
	}
	tokenFile := writeFile(t, "operators.json", `[{"name":"otto","token_sha256":"`+token+`"}]`)
	notJSON := writeFile(t, "viewers.yaml", "- name: vera\n")
	noOperator := writeFile(t, "none.json", "[]")
	dir := t.TempDir()
	// A held port makes the run stop after the start-up checks.
	held, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer held.Close()
	runCLICases(t, []cliCase{
		{"bad page addr", []string{"run", "--channel", "whatsapp"}, base("PACER_PAGE_ADDR", "9465"), 2, "PACER_PAGE_ADDR", token},
		{"viewers file missing", []string{"run", "--channel", "whatsapp"}, base("PACER_PAGE_VIEWERS_FILE", "/nonexistent/viewers.json"), 2, "PACER_PAGE_VIEWERS_FILE: /nonexistent/viewers.json: no such file", token},
		{"operators file missing", []string{"run", "--channel", "whatsapp"}, base("PACER_PAGE_OPERATORS_FILE", "/nonexistent/operators.json"), 2, "PACER_PAGE_OPERATORS_FILE: /nonexistent/operators.json: no such file", token},
		{"operators file a directory", []string{"run", "--channel", "whatsapp"}, base("PACER_PAGE_OPERATORS_FILE", dir), 2, "PACER_PAGE_OPERATORS_FILE: " + dir + " is a directory, not a credentials file", token},
		{"page on the metrics address", []string{"run", "--channel", "whatsapp"}, base("PACER_METRICS_ADDR", "127.0.0.1:9464", "PACER_PAGE_ADDR", "127.0.0.1:9464"), 2,
			"PACER_PAGE_ADDR: 127.0.0.1:9464 is the metrics address (PACER_METRICS_ADDR=127.0.0.1:9464): give the status page another port, or unset PACER_PAGE_ADDR to serve it beside /metrics", "in use"},
		{"page on every address of the metrics port", []string{"run", "--channel", "whatsapp"}, base("PACER_METRICS_ADDR", "127.0.0.1:9464", "PACER_PAGE_ADDR", ":9464"), 2, ":9464 is the metrics address", "in use"},
		{"operators file of no operator", []string{"run", "--channel", "whatsapp"}, base("PACER_PAGE_OPERATORS_FILE", noOperator, "PACER_PAGE_ADDR", held.Addr().String()), 2,
			`"level":"WARN","msg":"status page actions are off: the operators file lists no operator","PACER_PAGE_OPERATORS_FILE":"` + noOperator + `"`, token},
		{"viewers file not JSON", []string{"run", "--channel", "whatsapp"}, base("PACER_PAGE_VIEWERS_FILE", notJSON), 2, "PACER_PAGE_VIEWERS_FILE", token},
		{"token instead of its digest", []string{"run", "--channel", "whatsapp"}, base("PACER_PAGE_OPERATORS_FILE", tokenFile), 2, `entry 1 ("otto"): token_sha256 must be 64 hex digits`, token},
	})
}
