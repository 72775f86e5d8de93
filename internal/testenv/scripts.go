package testenv

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// runScript runs `bash scripts/<script> <verb>` from the repository root,
// with env ("NAME=value") added to this process's environment, for at most
// timeout, and returns its standard output. An error names the script and
// carries the tails of both outputs.
func runScript(script, verb string, timeout time.Duration, env ...string) (string, error) {
	root, err := RepoRoot()
	if err != nil {
		return "", err
	}
	path := filepath.Join(root, "scripts", script)
	if _, err := os.Stat(path); err != nil {
		return "", fmt.Errorf("%s is missing", path)
	}
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	var stdout, stderr bytes.Buffer
	cmd := exec.CommandContext(ctx, "bash", path, verb)
	cmd.Dir, cmd.Stdout, cmd.Stderr = root, &stdout, &stderr
	cmd.Env = append(os.Environ(), env...)
	if err := cmd.Run(); err != nil {
		return "", fmt.Errorf("scripts/%s %s: %v\n%s%s", script, verb, err, tail(stdout.String(), 10), tail(stderr.String(), 40))
	}
	return stdout.String(), nil
}

// PrivateKafka starts a broker of the test's own with scripts/kafka.sh, in
// a run directory under t.TempDir() (a restart of the shared broker would
// break other tests), stops it when the test ends, and returns its
// bootstrap address and a restart func (stop, then start on the same ports
// and data). A failing script call fails the test with its output.
func PrivateKafka(t testing.TB) (brokers string, restart func()) {
	t.Helper()
	run := "PACER_KAFKA_RUN=" + t.TempDir()
	kafka := func(verb string) string {
		out, err := runScript("kafka.sh", verb, 8*time.Minute, run)
		if err != nil {
			t.Fatalf("testenv: %v", err)
		}
		return strings.TrimSpace(out)
	}
	brokers = kafka("start")
	t.Cleanup(func() { kafka("stop") })
	return brokers, func() { kafka("restart") }
}
