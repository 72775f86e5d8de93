// Package deptest holds the tests that keep Pacer's data flowing one way:
// cmd -> pacer -> {bucket, channels, partitioner}; bucket -> lua;
// cmd -> pacer/statuspage -> {pacer, bucket}. The
// subpackages of bucket (adapt, ledger, window, quota) may import bucket and lua,
// never the other way.
package deptest

import (
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
)

const mod = "github.com/pacerhq/pacer"

// goCmd returns the go command that built this test (GOROOT/bin/go), or the
// one on PATH. Without one it fails the test: a guard that cannot look must
// not pass.
func goCmd(t *testing.T) string {
	t.Helper()
	if root := runtime.GOROOT(); root != "" {
		bin := filepath.Join(root, "bin", "go")
		if _, err := exec.LookPath(bin); err == nil {
			return bin
		}
	}
	bin, err := exec.LookPath("go")
	if err != nil {
		t.Fatalf("no go command in GOROOT (%q) or on PATH: the import boundaries cannot be checked", runtime.GOROOT())
	}
	return bin
}

// goList runs `go list args...` and returns its output.
func goList(t *testing.T, args ...string) string {
	t.Helper()
	cmd := exec.Command(goCmd(t), append([]string{"list"}, args...)...)
	out, err := cmd.Output()
	if err != nil {
		if ee, ok := err.(*exec.ExitError); ok {
			t.Fatalf("go list %s: %v\n%s", strings.Join(args, " "), err, ee.Stderr)
		}
		t.Fatalf("go list %s: %v", strings.Join(args, " "), err)
	}
	if len(strings.TrimSpace(string(out))) == 0 {
		t.Fatalf("go list %s printed nothing", strings.Join(args, " "))
	}
	return string(out)
}

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
	store := map[string]string{ // what the Redis stores beneath pacer/ (ledger, control, ingest quotas) may not import
		mod + "/pacer/statuspage": "stores are read by the page, not the other way", mod + "/channels": "providers are pacer's business",
		mod + "/partitioner": "keys arrive as strings", mod + "/cmd": "nothing imports cmd",
		kafka: "only cmd and pacer speak Kafka", prom: "only cmd and pacer measure",
	}
	for pkg, bad := range map[string]map[string]string{ // package => forbidden dependency prefix => why
		"pacer": {mod + "/cmd": "nothing imports cmd", mod + "/pacer/statuspage": "the status page reads the pacer, not the other way"},
		"pacer/statuspage": {
			mod + "/cmd": "nothing imports cmd", mod + "/channels/": "the page shows pacing state, never a provider's",
		},
		"deploy": {mod + "/": "deploy's tests check the deployment files, not Pacer's code"},
		"bucket": {
			mod + "/pacer": "pacer imports bucket, not the other way", mod + "/channels": "providers are pacer's business",
			mod + "/partitioner": "keys arrive as strings", mod + "/cmd": "nothing imports cmd",
			kafka: "only cmd and pacer speak Kafka", prom: "only cmd and pacer measure",
			mod + "/bucket/adapt": "adapt imports bucket, not the other way", mod + "/pacer/ledger": "ledger imports bucket, not the other way",
			mod + "/pacer/ingest/window": "window imports bucket, not the other way",
			mod + "/pacer/ingest/quota":  "quota imports bucket, not the other way",
			mod + "/pacer/control":       "control imports bucket, not the other way",
		},
		"bucket/adapt":        bucketSub,
		"pacer/ledger":        store,
		"pacer/ingest/window": store,
		"pacer/ingest/quota":  store,
		"pacer/control":       store,
		"pacer/ingest":        {mod + "/cmd": "nothing imports cmd"},
		"internal/logrepeat":  {mod + "/": "a logging helper depends on nothing of ours", "github.com/": "a logging helper is standard library only"},
		"lua":                 {mod + "/": "lua holds scripts and nothing else", "github.com/": "lua holds scripts and nothing else"},
		"partitioner": {
			mod + "/": "partitioner is pure functions", kafka: "partitioner computes, kgo sends", prom: "only cmd and pacer measure",
		},
		"channels": {mod + "/": "the contract depends on nothing of ours", "github.com/": "the contract is standard library only"},
		"channels/internal/httppool": {
			mod + "/pacer": "adapters return values; pacer decides", mod + "/bucket": "a transport does not pace",
			mod + "/cmd": "nothing imports cmd", kafka: "only cmd and pacer speak Kafka", prom: "only cmd and pacer measure",
		},
	} {
		checkDeps(t, pkg, bad)
	}
	adapters := adapterPackages(t)
	if len(adapters) < 4 {
		t.Fatalf("found adapters %v under channels/, want at least apns, fcm, sendgrid and whatsapp", adapters)
	}
	for _, p := range adapters {
		bad := map[string]string{
			mod + "/pacer": "adapters return values; pacer decides", mod + "/bucket": "adapters do not pace",
			mod + "/cmd": "nothing imports cmd", kafka: "only cmd and pacer speak Kafka", prom: "only cmd and pacer measure",
		}
		for _, other := range adapters {
			if other != p {
				bad[mod+"/channels/"+other] = "providers never import each other"
			}
		}
		checkDeps(t, "channels/"+p, bad)
	}
}

// TestOnlyBucketImportsLua checks direct imports, tests' included: the
// scripts are run by package bucket (and the packages beneath it) and
// nobody else.
func TestOnlyBucketImportsLua(t *testing.T) {
	out := goList(t, "-e", "-f", `{{.ImportPath}} {{join .Imports " "}} {{join .TestImports " "}} {{join .XTestImports " "}}`, mod+"/...")
	for _, line := range strings.Split(strings.TrimSpace(out), "\n") {
		f := strings.Fields(line)
		if len(f) == 0 || runsScripts(f[0]) {
			continue
		}
		for _, imp := range f[1:] {
			if imp == mod+"/lua" {
				t.Errorf("%s imports lua: only bucket and its subpackages run the scripts", f[0])
			}
		}
	}
}

// runsScripts reports whether package path may import lua: bucket, its
// subpackages, and the Redis stores beneath pacer/.
func runsScripts(path string) bool {
	switch path {
	case mod + "/lua", mod + "/bucket", mod + "/pacer/ledger", mod + "/pacer/control", mod + "/pacer/ingest/quota", mod + "/pacer/ingest/window":
		return true
	}
	return strings.HasPrefix(path, mod+"/bucket/")
}

// adapterPackages returns the provider adapters: the packages directly
// under channels/ but channels/internal, so a new channel is checked too.
func adapterPackages(t *testing.T) []string {
	t.Helper()
	out, err := exec.Command("go", "list", mod+"/channels/...").Output()
	if err != nil {
		t.Fatalf("go list channels: %v", err)
	}
	var names []string
	for _, p := range strings.Fields(string(out)) {
		name, ok := strings.CutPrefix(p, mod+"/channels/")
		if ok && !strings.Contains(name, "/") && name != "internal" {
			names = append(names, name)
		}
	}
	return names
}

func checkDeps(t *testing.T, pkg string, bad map[string]string) {
	t.Helper()
	deps := strings.Fields(goList(t, "-deps", mod+"/"+pkg))
	if len(deps) == 0 || deps[len(deps)-1] != mod+"/"+pkg {
		t.Fatalf("go list -deps %s: the package itself is missing from %v", pkg, deps)
	}
	for _, dep := range deps {
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
