// Package deptest holds the test that keeps Pacer's data flowing one way:
// cmd -> pacer -> {bucket, channels, partitioner}; bucket -> lua. The
// subpackages of bucket (adapt, ledger, window, quota) may import bucket and lua,
// never the other way.
package deptest

import (
	"os/exec"
	"strings"
	"testing"
)

const mod = "github.com/pacerhq/pacer"

// TestDataFlowsOneWay fails when a package gains an import its place in
// the design forbids, and says why (style.md 2.9).
func TestDataFlowsOneWay(t *testing.T) {
	kafka := "github.com/twmb/franz-go"
	prom := "github.com/prometheus/"
	bucketSub := map[string]string{ // what bucket's subpackages may not import
		mod + "/pacer": "pacer imports bucket, not the other way", mod + "/channels": "providers are pacer's business",
		mod + "/partitioner": "keys arrive as strings", mod + "/cmd": "nothing imports cmd",
		kafka: "only cmd and pacer speak Kafka", prom: "only cmd and pacer measure",
	}
	for pkg, bad := range map[string]map[string]string{ // package => forbidden dependency prefix => why
		"pacer": {mod + "/cmd": "nothing imports cmd"},
		"bucket": {
			mod + "/pacer": "pacer imports bucket, not the other way", mod + "/channels": "providers are pacer's business",
			mod + "/partitioner": "keys arrive as strings", kafka: "only cmd and pacer speak Kafka", prom: "only cmd and pacer measure",
			mod + "/bucket/adapt": "adapt imports bucket, not the other way", mod + "/bucket/ledger": "ledger imports bucket, not the other way",
			mod + "/bucket/window": "window imports bucket, not the other way",
			mod + "/bucket/quota":  "quota imports bucket, not the other way",
		},
		"bucket/adapt":  bucketSub,
		"bucket/ledger": bucketSub,
		"bucket/window": bucketSub,
		"bucket/quota":  bucketSub,
		"pacer/ingest":  {mod + "/cmd": "nothing imports cmd", mod + "/lua": "only bucket runs the scripts"},
		"lua":           {mod + "/": "lua holds scripts and nothing else", "github.com/": "lua holds scripts and nothing else"},
		"partitioner": {
			mod + "/": "partitioner is pure functions", kafka: "partitioner computes, kgo sends", prom: "only cmd and pacer measure",
		},
		"channels": {mod + "/": "the contract depends on nothing of ours", "github.com/": "the contract is standard library only"},
	} {
		checkDeps(t, pkg, bad)
	}
	for _, p := range []string{"apns", "fcm", "sendgrid", "whatsapp"} {
		bad := map[string]string{
			mod + "/pacer": "adapters return values; pacer decides", mod + "/bucket": "adapters do not pace",
			mod + "/cmd": "nothing imports cmd", kafka: "only cmd and pacer speak Kafka", prom: "only cmd and pacer measure",
		}
		for _, other := range []string{"apns", "fcm", "sendgrid", "whatsapp"} {
			if other != p {
				bad[mod+"/channels/"+other] = "providers never import each other"
			}
		}
		checkDeps(t, "channels/"+p, bad)
	}
}

// TestOnlyBucketImportsLua checks direct imports: the scripts are run by
// package bucket and its subpackages, and nobody else.
func TestOnlyBucketImportsLua(t *testing.T) {
	out, err := exec.Command("go", "list", "-f", "{{.ImportPath}} {{join .Imports \" \"}}", mod+"/...").Output()
	if err != nil {
		t.Fatalf("go list: %v", err)
	}
	for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		f := strings.Fields(line)
		for _, imp := range f[1:] {
			if imp == mod+"/lua" && f[0] != mod+"/bucket" && !strings.HasPrefix(f[0], mod+"/bucket/") {
				t.Errorf("%s imports lua: only bucket and its subpackages run the scripts", f[0])
			}
		}
	}
}

func checkDeps(t *testing.T, pkg string, bad map[string]string) {
	t.Helper()
	out, err := exec.Command("go", "list", "-deps", mod+"/"+pkg).Output()
	if err != nil {
		t.Fatalf("go list -deps %s: %v", pkg, err)
	}
	for _, dep := range strings.Fields(string(out)) {
		if dep == mod+"/"+pkg {
			continue
		}
		for prefix, why := range bad {
			if strings.HasPrefix(dep, prefix) {
				t.Errorf("%s depends on %s: %s", pkg, dep, why)
			}
		}
	}
}
