package main

import (
	"encoding/json"
	"io/fs"
	"maps"
	"os"
	"path"
	"reflect"
	"regexp"
	"slices"
	"strings"
	"testing"

	"sigs.k8s.io/yaml"

	"github.com/pacerhq/pacer/pacer/ingest"
)

// repo is the repository's tree. Its files that list the channels beyond
// cmd/pacer are checked against channelTable below, so that a channel is
// its package plus one row of the table, and a list that drifts fails here.
var repo = os.DirFS("../..")

// tableNames returns the names of channelTable, in order.
func tableNames() []string {
	var names []string
	for _, ch := range channelTable {
		names = append(names, ch.name)
	}
	return names
}

// sameNames fails t unless got holds the names of channelTable, in any
// order, each once.
func sameNames(t *testing.T, what string, got []string) {
	t.Helper()
	want := slices.Sorted(slices.Values(tableNames()))
	if g := slices.Sorted(slices.Values(got)); !slices.Equal(g, want) {
		t.Errorf("%s lists channels %v; the channel table has %v", what, g, want)
	}
}

// checkEnv fails t for a variable of env, set for channel name's pacer,
// that no command reads or that belongs to another channel.
func checkEnv(t *testing.T, where, name string, env []string) {
	t.Helper()
	known := knownSettings()
	for _, v := range env {
		if !known[v] {
			t.Errorf("%s sets %s, which pacer does not read", where, v)
		}
		for _, ch := range channelTable {
			if ch.name != name && strings.HasPrefix(v, ch.prefix()) {
				t.Errorf("%s (channel %s) sets %s, a setting of channel %s", where, name, v, ch.name)
			}
		}
	}
}

// TestChannelPackages: the adapter packages under channels/ (the folders
// holding Go files, as channels/internal holds none) are the rows of the
// table, each with its fake provider package <name>test.
func TestChannelPackages(t *testing.T) {
	files, err := fs.Glob(repo, "channels/*/*.go")
	if err != nil || len(files) == 0 {
		t.Fatalf("no Go files in channels/*/: %v", err)
	}
	dirs := map[string]bool{}
	for _, f := range files {
		dirs[path.Base(path.Dir(f))] = true
	}
	sameNames(t, "channels/", slices.Collect(maps.Keys(dirs)))
	for _, name := range tableNames() {
		fake := path.Join("channels", name, name+"test", name+"test.go")
		if _, err := fs.Stat(repo, fake); err != nil {
			t.Errorf("channel %s has no fake provider %s: %v", name, fake, err)
		}
	}
}

// TestKubernetesChannels: deploy/k8s has a manifest pacer-<name>.yaml per
// row, and no other, whose Deployment runs `pacer run --channel <name>`
// with settings pacer reads (none of another channel's), and
// kustomization.yaml lists each.
func TestKubernetesChannels(t *testing.T) {
	files, err := fs.Glob(repo, "deploy/k8s/pacer-*.yaml")
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, f := range files {
		names = append(names, strings.TrimSuffix(strings.TrimPrefix(path.Base(f), "pacer-"), ".yaml"))
	}
	sameNames(t, "deploy/k8s/pacer-*.yaml", names)
	for _, f := range files {
		name := strings.TrimSuffix(strings.TrimPrefix(path.Base(f), "pacer-"), ".yaml")
		b, err := fs.ReadFile(repo, f)
		if err != nil {
			t.Fatal(err)
		}
		runs := 0
		for _, doc := range regexp.MustCompile(`(?m)^---\s*$`).Split(string(b), -1) {
			var d struct {
				Kind string
				Spec struct {
					Template struct {
						Spec struct {
							Containers []struct {
								Args []string
								Env  []struct{ Name string }
							}
						}
					}
				}
			}
			if err := yaml.Unmarshal([]byte(doc), &d); err != nil {
				t.Fatalf("%s: %v", f, err)
			}
			if d.Kind != "Deployment" {
				continue
			}
			for _, c := range d.Spec.Template.Spec.Containers {
				if slices.Equal(c.Args, []string{"run", "--channel", name}) {
					runs++
				}
				var env []string
				for _, e := range c.Env {
					env = append(env, e.Name)
				}
				checkEnv(t, path.Base(f), name, env)
			}
		}
		if runs != 1 {
			t.Errorf("%s: %d containers run `pacer run --channel %s`, want 1", path.Base(f), runs, name)
		}
	}
	b, err := fs.ReadFile(repo, "deploy/k8s/kustomization.yaml")
	if err != nil {
		t.Fatal(err)
	}
	var k struct{ Resources []string }
	if err := yaml.Unmarshal(b, &k); err != nil {
		t.Fatal(err)
	}
	for _, name := range tableNames() {
		if !slices.Contains(k.Resources, "pacer-"+name+".yaml") {
			t.Errorf("kustomization.yaml does not list pacer-%s.yaml (resources %v)", name, k.Resources)
		}
	}
}

// TestComposeChannels: deploy/compose.yaml has a service pacer-<name> per
// row, and no other pacer-* service but pacer-ingest, running `pacer run
// --channel <name>` with settings pacer reads (none of another channel's);
// pacer-ingest runs `pacer ingest` with settings pacer ingest reads.
func TestComposeChannels(t *testing.T) {
	b, err := fs.ReadFile(repo, "deploy/compose.yaml")
	if err != nil {
		t.Fatal(err)
	}
	var c struct {
		Services map[string]struct {
			Command     []string
			Environment map[string]any
		}
	}
	if err := yaml.Unmarshal(b, &c); err != nil {
		t.Fatal(err)
	}
	var names []string
	for svc, s := range c.Services {
		name, ok := strings.CutPrefix(svc, "pacer-")
		if !ok {
			continue
		}
		if name == "ingest" {
			checkIngestService(t, svc, s.Command, s.Environment)
			continue
		}
		names = append(names, name)
		if !slices.Equal(s.Command, []string{"run", "--channel", name}) {
			t.Errorf("compose service %s runs %q, want run --channel %s", svc, s.Command, name)
		}
		var env []string
		for v := range s.Environment {
			env = append(env, v)
		}
		checkEnv(t, "compose service "+svc, name, env)
	}
	sameNames(t, "deploy/compose.yaml's pacer-* services", names)
}

// checkIngestService fails unless compose's service svc runs `pacer
// ingest` and sets only settings pacer ingest reads: its own
// (PACER_INGEST_*) and the shared ones of ingestShared.
func checkIngestService(t *testing.T, svc string, command []string, env map[string]any) {
	t.Helper()
	if !slices.Equal(command, []string{"ingest"}) {
		t.Errorf("compose service %s runs %q, want ingest", svc, command)
	}
	own := map[string]bool{}
	for _, r := range envRows(reflect.TypeOf(ingestConfig{}), nil) {
		own[r.name] = true
	}
	for v := range env {
		shared := false
		for _, p := range ingestShared {
			shared = shared || strings.HasPrefix(v, p)
		}
		if !own[v] && !(shared && knownSettings()[v]) {
			t.Errorf("compose service %s sets %s, which pacer ingest does not read", svc, v)
		}
	}
}

// TestOpenAPIChannels: the ingest API's channel parameter enumerates the
// rows, in the table's order.
func TestOpenAPIChannels(t *testing.T) {
	var doc struct {
		Paths map[string]map[string]json.RawMessage // path => method (or "parameters") => its object
	}
	if err := yaml.Unmarshal(ingest.OpenAPI, &doc); err != nil {
		t.Fatal(err)
	}
	type param struct {
		Name, In string
		Schema   struct{ Enum []string }
	}
	found := 0
	for route, items := range doc.Paths {
		for key, raw := range items {
			var params []param
			if key == "parameters" {
				_ = json.Unmarshal(raw, &params)
			} else {
				var op struct{ Parameters []param }
				_ = json.Unmarshal(raw, &op) // not an operation: no parameters
				params = op.Parameters
			}
			for _, p := range params {
				if p.Name == "channel" && p.In == "path" {
					found++
					if !slices.Equal(p.Schema.Enum, tableNames()) {
						t.Errorf("openapi.yaml %s %s: channel enum %v; the channel table has %v", key, route, p.Schema.Enum, tableNames())
					}
				}
			}
		}
	}
	if found == 0 {
		t.Errorf("openapi.yaml has no channel path parameter in %d paths", len(doc.Paths))
	}
}
