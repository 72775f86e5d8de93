//go:build e2e

package main

// Process-level checks of the CLI: the built binary, its environment and
// its logs.

import (
	"errors"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/pacerhq/pacer/channels/whatsapp/whatsapptest"
)

// TestRunNamesRedisWhenDown: `pacer run` with Redis not answering at
// start-up logs which server it tried (the setting and host), never the
// password of the URL.
func TestRunNamesRedisWhenDown(t *testing.T) {
	parallel(t)
	e := newE2E(t, whatsapptest.Config{})
	p := e.run("PACER_REDIS_URL=redis://:hunter2@127.0.0.1:1/0")
	defer p.stop(t)
	if !waitFor(30*time.Second, func() bool { return strings.Contains(p.logs(), "redis not answering at start-up") }) {
		t.Fatalf("no start-up warning about Redis within 30 s\n%s", p.logs())
	}
	if logs := p.logs(); !strings.Contains(logs, `redis="PACER_REDIS_URL host 127.0.0.1:1"`) || strings.Contains(logs, "hunter2") {
		t.Errorf("the warning does not name PACER_REDIS_URL's host, or shows the password:\n%s", logs)
	}
}

// TestMisspelledSettingStopsStartup: the binary refuses to start with a
// misspelled setting in its environment (exit 2, naming it and the setting
// meant, not its value), whatever the command.
func TestMisspelledSettingStopsStartup(t *testing.T) {
	parallel(t)
	cmd := exec.Command(pacerBin, "status", "--channel", "whatsapp")
	cmd.Env = append(os.Environ(), "PACER_WHATSAP_RATE=hunter2")
	out, err := cmd.CombinedOutput()
	var ee *exec.ExitError
	if !errors.As(err, &ee) || ee.ExitCode() != 2 ||
		!strings.Contains(string(out), "PACER_WHATSAP_RATE: no such setting; did you mean PACER_WHATSAPP_RATE?") ||
		strings.Contains(string(out), "hunter2") {
		t.Errorf("misspelled setting: %v, %q; want exit 2 naming PACER_WHATSAP_RATE and PACER_WHATSAPP_RATE, not the value", err, out)
	}
}
