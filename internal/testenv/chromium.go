package testenv

import (
	"bytes"
	"context"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"
)

// Chromium runs Debian's headless Chromium ($PACER_CHROMIUM, else
// chromium on PATH; scripts/test-env.sh installs it) with args, such as
// --dump-dom URL or --screenshot=FILE URL, and returns its stdout. Without
// a Chromium the test fails: a page that cannot be looked at must not pass.
// Under -short with $PACER_CHROMIUM unset it skips the test.
func Chromium(t testing.TB, args ...string) []byte {
	t.Helper()
	bin := ChromiumPath(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	base := []string{"--headless", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage", "--hide-scrollbars",
		"--no-first-run", "--disable-extensions", "--user-data-dir=" + t.TempDir()}
	var stdout, stderr bytes.Buffer
	cmd := exec.CommandContext(ctx, bin, append(base, args...)...)
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		e := stderr.String()
		if len(e) > 2000 {
			e = e[len(e)-2000:]
		}
		t.Fatalf("chromium %s: %v\n%s", strings.Join(args, " "), err, e)
	}
	return stdout.Bytes()
}

// ChromiumPath returns the Chromium binary [Chromium] runs, for a test
// that drives it itself (over the DevTools protocol); without one it
// fails the test, or skips it under -short with $PACER_CHROMIUM unset.
func ChromiumPath(t testing.TB) string {
	t.Helper()
	bin := os.Getenv("PACER_CHROMIUM")
	if bin == "" {
		skipShort(t, "browser", "PACER_CHROMIUM")
	}
	if bin == "" {
		var err error
		if bin, err = exec.LookPath("chromium"); err != nil {
			t.Fatalf("no chromium on PATH (scripts/test-env.sh installs Debian's; or set PACER_CHROMIUM): the page cannot be checked in a browser")
		}
	}
	return bin
}
