package testenv

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// PrivateKafka starts a broker of the test's own with scripts/kafka.sh, in
// a run directory under t.TempDir() (a restart of the shared broker would
// break other tests), stops it when the test ends, and returns its
// bootstrap address and a restart func (stop, then start on the same ports
// and data). A failing script call fails the test with its output.
func PrivateKafka(t testing.TB) (brokers string, restart func()) {
	t.Helper()
	root, err := RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	run := t.TempDir()
	script := filepath.Join(root, "scripts", "kafka.sh")
	kafka := func(verb string) string {
		cmd := exec.Command("bash", script, verb)
		cmd.Env = append(os.Environ(), "PACER_KAFKA_RUN="+run)
		var stderr bytes.Buffer
		cmd.Stderr = &stderr
		out, err := cmd.Output()
		if err != nil {
			t.Fatalf("kafka.sh %s: %v\n%s%s", verb, err, out, stderr.Bytes())
		}
		return strings.TrimSpace(string(out))
	}
	brokers = kafka("start")
	t.Cleanup(func() { kafka("stop") })
	return brokers, func() { kafka("restart") }
}
