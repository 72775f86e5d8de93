// Package deptest holds the tests that keep Pacer's data flowing one way.
// The layout, each arrow an allowed import:
//
//	cmd/pacer                 wiring only; nothing imports cmd
//	  -> pacer/consumer       the consume-pace-send loop
//	  -> pacer/ingest         the HTTP ingest gateway (+ ingest/quota, ingest/window)
//	  -> pacer/statuspage     the status page (+ statuspage/actions: who may read and act, the actions' API)
//	  -> pacer/webhook        providers' status webhooks -> events topics -> suppressions
//	  -> pacer/operate        an operator's actions, shared by the commands and the page's (campaigns, limits, DLQ)
//	  -> pacer/produce        publish, DLQ replay, topics, Kafka errors
//	       -> pacer/keypace   one pacing key: its gate, slot and report (AIMD, breaker, cooldowns)
//	       -> pacer/park      what a parked record carries and how it waits
//	       -> pacer/campaign  a consumer's live view of campaign states and its counts
//	            -> pacer/inflight a key's records in hand by Little's law (answer times)
//	       -> pacer/envelope  the message and its Kafka headers
//	       -> pacer/ledger    the idempotency ledger (Redis)
//	       -> pacer/suppress  suppressed recipients per pacing key (Redis; the ledger's claim reads them)
//	       -> pacer/portfolio WhatsApp business portfolios: the messaging-limit guard (Redis)
//	       -> pacer/control   live limits, campaign states, a key's policy (Redis)
//	       -> pacer/message   one message looked up: its ledger entry, attempts, webhook events
//	            -> bucket     token buckets (+ bucket/adapt: AIMD, breaker) -> lua
//	  -> channels/<name>      one provider adapter each -> channels (the contract)
//
// The rules:
//   - No package depends on its parent or any ancestor
//     (TestNoPackageImportsItsParent), but where the parent is the contract
//     its children implement: channels (the provider contract) and bucket
//     (the token bucket whose rate bucket/adapt adapts).
//   - bucket/ imports nothing from pacer/, channels/, partitioner or cmd,
//     nor Kafka nor Prometheus: it paces and returns values.
//   - Under pacer/ the applications (consumer, ingest, statuspage, webhook) import
//     no other application, and the parts they share (envelope, produce,
//     ledger, suppress, portfolio, control, keypace, park, campaign, message, operate) import no application; envelope imports
//     nothing of ours (TestPacerSiblings). Every package under pacer/ has a place in
//     that list, so a new one must be given its rules. Package pacer itself
//     is their map (doc.go) and imports nothing.
//   - Only the packages that run Lua scripts import lua: bucket, its
//     subpackages, ledger, suppress, portfolio, control and the ingest quotas.
//   - Only cmd and packages under pacer/ speak Kafka or measure
//     (Prometheus); providers never import each other; partitioner is pure
//     functions; lua holds scripts only.
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
	buckets := map[string]string{ // what bucket and its subpackages may not import
		mod + "/pacer": "bucket imports nothing from pacer: pacer imports bucket", mod + "/channels": "providers are pacer's business",
		mod + "/partitioner": "keys arrive as strings", mod + "/cmd": "nothing imports cmd",
		kafka: "only cmd and pacer speak Kafka", prom: "only cmd and pacer measure",
	}
	store := map[string]string{ // what the Redis stores beneath pacer/ (ledger, control, ingest quotas) may not import
		mod + "/channels": "providers are pacer's business", mod + "/partitioner": "keys arrive as strings",
		mod + "/cmd": "nothing imports cmd", kafka: "a store speaks Redis only", prom: "a store returns values; its callers measure",
	}
	for pkg, bad := range map[string]map[string]string{ // package => forbidden dependency prefix => why
		"pacer":            {mod + "/": "pacer/ holds its subpackages and their map, no code", "github.com/": "pacer/ holds its subpackages and their map, no code"},
		"pacer/consumer":   {mod + "/cmd": "nothing imports cmd"},
		"pacer/statuspage": {mod + "/cmd": "nothing imports cmd", mod + "/channels/": "the page shows pacing state, never a provider's", kafka: "the page reads Redis only"},
		"pacer/ingest":     {mod + "/cmd": "nothing imports cmd", mod + "/channels/": "ingest validates envelopes, providers are the consumer's"},
		"pacer/webhook": {
			mod + "/cmd": "nothing imports cmd", mod + "/channels/": "webhooks are read here; adapters only send",
			mod + "/pacer/ledger": "outcomes reach the claim through suppress, the ledger through the webhook.Ledger cmd wires", mod + "/pacer/consumer": "an application imports no other",
		},
		"pacer/produce": {
			mod + "/cmd": "nothing imports cmd", mod + "/bucket": "producing does not pace", mod + "/channels": "producing does not send to providers",
			prom: "produce returns summaries; its callers measure",
		},
		"pacer/envelope": {mod + "/": "the message contract depends on nothing of ours", prom: "the message contract measures nothing"},
		"pacer/campaign": {
			mod + "/channels": "campaign control never sends", mod + "/cmd": "nothing imports cmd",
			kafka: "campaign states live in Redis", prom: "campaign returns values; the consumer measures",
		},
		"pacer/park": {
			mod + "/bucket": "a parked record reads its key's rate through its caller", mod + "/channels": "parking never sends",
			mod + "/cmd": "nothing imports cmd", prom: "park returns values; the consumer measures",
		},
		"pacer/statuspage/actions": {
			mod + "/cmd": "nothing imports cmd", mod + "/channels/": "an operator acts on pacing state, never through a provider",
			mod + "/pacer/consumer": "actions reach the pacers through Redis (package control), not their code",
		},
		"pacer/operate": {
			mod + "/cmd": "nothing imports cmd", mod + "/channels": "operating a channel never sends", prom: "operate returns values and logs; its callers measure",
		},
		"deploy":              {mod + "/": "deploy's tests check the deployment files, not Pacer's code"},
		"bucket":              buckets,
		"bucket/adapt":        buckets,
		"pacer/ledger":        store,
		"pacer/suppress":      store,
		"pacer/portfolio":     store,
		"pacer/control":       store,
		"pacer/ingest/window": store,
		"pacer/ingest/quota":  store,
		"internal/wire":       {mod + "/": "a conversion helper depends on nothing of ours", "github.com/": "a conversion helper is standard library only"},
		"internal/logrepeat":  {mod + "/": "a logging helper depends on nothing of ours", "github.com/": "a logging helper is standard library only"},
		"internal/tick":       {mod + "/": "a loop helper depends on nothing of ours", "github.com/": "a loop helper is standard library only"},
		"internal/tlsfail":    {mod + "/": "a TLS error reader depends on nothing of ours", "github.com/": "a TLS error reader is standard library only"},
		"lua":                 {mod + "/": "lua holds scripts and nothing else", "github.com/": "lua holds scripts and nothing else"},
		"partitioner": {
			mod + "/": "partitioner is pure functions", kafka: "partitioner computes, kgo sends", prom: "only cmd and pacer measure",
		},
		"channels": {mod + "/": "the contract depends on nothing of ours", "github.com/": "the contract is standard library only"},
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

// contracts are the parents their children may import: the interface or
// type the children implement or adapt.
var contracts = map[string]string{
	mod + "/channels": "the provider contract every adapter implements",
	mod + "/bucket":   "the token bucket whose rate bucket/adapt adapts",
}

// TestNoPackageImportsItsParent: no package of the module depends,
// directly or not, on a package above it in the tree (its parent, its
// parent's parent, ...), but on a contract of [contracts]. A package
// that needs something of its parent's takes it from a sibling both
// can import.
func TestNoPackageImportsItsParent(t *testing.T) {
	all := moduleDeps(t)
	if len(all) < 20 {
		t.Fatalf("go list found %d packages in %s, want the whole module", len(all), mod)
	}
	for pkg, deps := range all {
		for _, dep := range deps {
			if !strings.HasPrefix(pkg, dep+"/") {
				continue
			}
			if _, ok := contracts[dep]; ok {
				continue
			}
			t.Errorf("%s depends on %s, a package above it: a parent is built from its children, not the other way",
				strings.TrimPrefix(pkg, mod+"/"), strings.TrimPrefix(dep, mod+"/"))
		}
	}
}

// pacerApps are the applications under pacer/: each is run by a command of
// its own and imports no other. pacerShared are the parts they share,
// which import no application. Every package under pacer/ is in one of the
// two (TestPacerSiblings fails on one that is not).
var (
	pacerApps = map[string]bool{
		mod + "/pacer/consumer": true, mod + "/pacer/ingest": true, mod + "/pacer/statuspage": true,
		mod + "/pacer/webhook": true, mod + "/pacer/callback": true,
	}
	pacerShared = map[string]bool{
		mod + "/pacer/envelope": true, mod + "/pacer/produce": true, mod + "/pacer/ledger": true, mod + "/pacer/suppress": true, mod + "/pacer/control": true,
		mod + "/pacer/portfolio": true, mod + "/pacer/keypace": true, mod + "/pacer/park": true, mod + "/pacer/campaign": true, mod + "/pacer/inflight": true,
		mod + "/pacer/message": true, mod + "/pacer/operate": true, mod + "/pacer/outcomes": true,
	}
)

// appOf returns the application or shared part pkg belongs to: itself,
// or the nearest listed package above it (pacer/ingest for
// pacer/ingest/quota); "" when it is in neither list.
func appOf(pkg string) string {
	for p := pkg; strings.HasPrefix(p, mod+"/pacer/"); p = p[:strings.LastIndex(p, "/")] {
		if pacerShared[p] || pacerApps[p] {
			return p
		}
	}
	return ""
}

// TestPacerSiblings: the applications under pacer/ (the consumer, ingest,
// the status page) import no other application, and the parts they share
// import no application: each application can be read, built and changed
// alone, and the shared parts do not grow back into a whole.
func TestPacerSiblings(t *testing.T) {
	if files := strings.Fields(goList(t, "-f", `{{join .GoFiles " "}} {{join .TestGoFiles " "}} {{join .XTestGoFiles " "}}`, mod+"/pacer")); len(files) != 1 || files[0] != "doc.go" {
		t.Errorf("package pacer has files %v, want doc.go only: code goes in the subpackage whose job it is", files)
	}
	all := moduleDeps(t)
	seen := 0
	for pkg, deps := range all {
		if !strings.HasPrefix(pkg, mod+"/pacer/") {
			continue // package pacer itself is the map: TestDataFlowsOneWay holds it to no imports
		}
		seen++
		home := appOf(pkg)
		if home == "" {
			t.Errorf("%s is under pacer/ but neither an application nor a shared part: give it a place in pacerApps or pacerShared",
				strings.TrimPrefix(pkg, mod+"/"))
			continue
		}
		for _, dep := range deps {
			there := appOf(dep)
			if there == "" || there == home || !pacerApps[there] {
				continue
			}
			what := "an application imports no other"
			if pacerShared[home] {
				what = "a shared part imports no application"
			}
			t.Errorf("%s depends on %s: %s", strings.TrimPrefix(pkg, mod+"/"), strings.TrimPrefix(dep, mod+"/"), what)
		}
	}
	if seen < len(pacerApps)+len(pacerShared) {
		t.Fatalf("go list found %d packages under pacer/, want at least the %d listed", seen, len(pacerApps)+len(pacerShared))
	}
}

// moduleDeps returns each package of the module (tests left out) with
// every package it depends on, directly or not.
func moduleDeps(t *testing.T) map[string][]string {
	t.Helper()
	out := goList(t, "-f", `{{.ImportPath}}{{range .Deps}} {{.}}{{end}}`, mod+"/...")
	all := map[string][]string{}
	for _, line := range strings.Split(strings.TrimSpace(out), "\n") {
		f := strings.Fields(line)
		if len(f) > 0 {
			all[f[0]] = f[1:]
		}
	}
	return all
}

// TestOnlyScriptRunnersImportLua checks direct imports, tests' included:
// the scripts are run by the packages [runsScripts] names and nobody else.
func TestOnlyScriptRunnersImportLua(t *testing.T) {
	out := goList(t, "-e", "-f", `{{.ImportPath}} {{join .Imports " "}} {{join .TestImports " "}} {{join .XTestImports " "}}`, mod+"/...")
	for _, line := range strings.Split(strings.TrimSpace(out), "\n") {
		f := strings.Fields(line)
		if len(f) == 0 || runsScripts(f[0]) {
			continue
		}
		for _, imp := range f[1:] {
			if imp == mod+"/lua" {
				t.Errorf("%s imports lua: only bucket, its subpackages, the ledger, suppress, portfolio, control and the ingest quotas run the scripts", f[0])
			}
		}
	}
}

// runsScripts reports whether package path may import lua: bucket, its
// subpackages, and the Redis stores beneath pacer/.
func runsScripts(path string) bool {
	switch path {
	case mod + "/lua", mod + "/bucket", mod + "/pacer/ledger", mod + "/pacer/suppress", mod + "/pacer/portfolio", mod + "/pacer/control", mod + "/pacer/ingest/quota", mod + "/pacer/ingest/window":
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
