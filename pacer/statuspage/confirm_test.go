package statuspage

import (
	"encoding/json"
	"os"
	"os/exec"
	"regexp"
	"strings"
	"testing"
)

// TestReplayConfirmWarnsOfUnknownOutcomes: the page's question before a
// DLQ replay says that unknown-outcome records may be sent twice, when
// some are chosen, and only then. The function is run in Node.js when it
// is installed.
func TestReplayConfirmWarnsOfUnknownOutcomes(t *testing.T) {
	b, err := os.ReadFile("status.html")
	if err != nil {
		t.Fatal(err)
	}
	html := string(b)
	for _, want := range []string{`cb.dataset.reason = r.reason;`, `c.dataset.reason === "unknown-outcome"`, `confirm(replayConfirm(records.length, unknown))`} {
		if !strings.Contains(html, want) {
			t.Errorf("status.html does not hold %s: the replay button does not count the unknown-outcome records it asks about", want)
		}
	}
	fn := regexp.MustCompile(`(?s)\nfunction replayConfirm\(.*?\n}\n`).FindString(html)
	if fn == "" {
		t.Fatal("status.html has no function replayConfirm(n, unknown)")
	}
	node, err := exec.LookPath("node")
	if err != nil {
		t.Skip("node is not installed: replayConfirm not run")
	}
	out, err := exec.Command(node, "-e", fn+`console.log(JSON.stringify([replayConfirm(2, 0), replayConfirm(3, 1)]))`).Output()
	if err != nil {
		t.Fatalf("node: %v", err)
	}
	var got [2]string
	if err := json.Unmarshal(out, &got); err != nil {
		t.Fatalf("node printed %q: %v", out, err)
	}
	if got[0] != "Replay 2 DLQ record(s) to the main topic?" {
		t.Errorf("replayConfirm(2, 0) = %q; want the question alone", got[0])
	}
	const warn = "1 of them are unknown-outcome: no answer came for them, so the provider may have accepted them already. Replaying sends them again: a recipient may get such a message twice."
	if got[1] != "Replay 3 DLQ record(s) to the main topic?\n\n"+warn {
		t.Errorf("replayConfirm(3, 1) = %q; want the question and %q", got[1], warn)
	}
}
