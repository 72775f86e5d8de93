package lua_test

import (
	"os/exec"
	"strings"
	"testing"

	"github.com/pacerhq/pacer/lua"
)

var scripts = map[string]string{
	"take.lua":         lua.Take,
	"state.lua":        lua.State,
	"cooldown.lua":     lua.Cooldown,
	"reserve.lua":      lua.Reserve,
	"lease_return.lua": lua.LeaseReturn,
	"window.lua":       lua.Window,
}

// bucketScripts share the refill block (TestRefillShared).
var bucketScripts = []string{"take.lua", "state.lua", "reserve.lua", "lease_return.lua"}

// TestContracts checks that every script opens with its contract (style.md
// 2.3): KEYS, ARGV with units, and the reply shape.
func TestContracts(t *testing.T) {
	for name, src := range scripts {
		// The contract is the comment block that opens the file.
		var header []string
		for _, line := range strings.Split(src, "\n") {
			if !strings.HasPrefix(line, "--") {
				break
			}
			header = append(header, line)
		}
		h := strings.Join(header, "\n")
		for _, want := range []string{"-- " + name + ": ", "-- KEYS[1]", "-- ARGV[1]", "-- Reply:", "-- Writes:"} {
			if !strings.Contains(h, want) {
				t.Errorf("%s: the opening comment block lacks %q", name, want)
			}
		}
	}
}

// TestRefillShared checks that every script reading a token bucket does so
// with the same code: Lua scripts cannot include each other, so the block
// is copied, and must stay identical.
func TestRefillShared(t *testing.T) {
	block := func(name, src string) string {
		_, rest, ok := strings.Cut(src, "-- BEGIN refill")
		body, _, ok2 := strings.Cut(rest, "-- END refill")
		if !ok || !ok2 || len(body) < 100 {
			t.Fatalf("%s: no refill block between -- BEGIN refill and -- END refill", name)
		}
		return body
	}
	want := block(bucketScripts[0], scripts[bucketScripts[0]])
	for _, name := range bucketScripts[1:] {
		if block(name, scripts[name]) != want {
			t.Errorf("the refill blocks of %s and %s differ", bucketScripts[0], name)
		}
	}
}

// TestOnlyBucketImportsLua enforces style.md 2.9: package lua is an
// implementation detail of package bucket.
func TestOnlyBucketImportsLua(t *testing.T) {
	if testing.Short() {
		t.Skip("runs go list over the module")
	}
	gobin, err := exec.LookPath("go")
	if err != nil {
		t.Skip("no go command")
	}
	out, err := exec.Command(gobin, "list", "-e", "-f",
		`{{.ImportPath}} {{join .Imports " "}} {{join .TestImports " "}} {{join .XTestImports " "}}`,
		"github.com/pacerhq/pacer/...").Output()
	if err != nil {
		t.Fatalf("go list: %v", err)
	}
	const self = "github.com/pacerhq/pacer/lua"
	for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		fields := strings.Fields(line)
		if len(fields) == 0 || fields[0] == self || fields[0] == "github.com/pacerhq/pacer/bucket" {
			continue
		}
		for _, imp := range fields[1:] {
			if imp == self {
				t.Errorf("%s imports %s: only package bucket may (it owns the scripts' contracts)", fields[0], self)
			}
		}
	}
}
