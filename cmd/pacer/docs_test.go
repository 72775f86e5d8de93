package main

// The doc checks: docs/ follows the code, and a test fails when it does not.
//
//   - docs/configuration.md's settings tables are generated from the config
//     structs (their env tags), the channel table and the defaults `pacer run
//     -h` prints ([configDoc]). TestConfigurationDoc fails when the file
//     differs from what the generator makes of it. After adding, removing
//     or changing a setting, regenerate the tables with
//
//	go test ./cmd/pacer -run '^TestConfigurationDoc$' -update-docs
//
//     which keeps each row's unit and meaning, fills the variables and
//     defaults from the code, and takes a new setting's meaning from its Go
//     doc comment (a channel setting has none: its row says TODO, and the
//     test fails until someone writes it).
//   - docs/operations.md's metric tables list exactly the metrics `pacer run`
//     and `pacer ingest` register, each with its labels (TestMetricsDoc).
//   - docs/commands.md has a section for every command and subcommand of
//     the CLI, naming each of its flags (TestCommandsDoc).
//   - every relative link of README.md, BENCHMARKS.md and docs/ leads to a
//     file, and to a heading of it when it names one (TestDocLinks).
//   - docs/architecture.md lists a key of every shape bucket.Keys names
//     (TestRedisKeysDoc).
//   - every pacer command line shown in a code block of README.md and docs/
//     names a command, subcommand and flags the binary has
//     (TestDocCommandLines): the quick start cannot drift from the CLI.

import (
	"bytes"
	"context"
	"flag"
	"fmt"
	"github.com/pacerhq/pacer/pacer/callback"
	"github.com/pacerhq/pacer/pacer/outcomes"
	"github.com/pacerhq/pacer/pacer/webhook"
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"os"
	"path/filepath"
	"reflect"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/pacerhq/pacer/bucket"
	"github.com/pacerhq/pacer/bucket/adapt"
	"github.com/pacerhq/pacer/channels"
	"github.com/pacerhq/pacer/pacer/consumer"
	"github.com/pacerhq/pacer/pacer/control"
	"github.com/pacerhq/pacer/pacer/ingest"
	"github.com/pacerhq/pacer/pacer/ingest/quota"
	"github.com/pacerhq/pacer/pacer/ledger"
	"github.com/pacerhq/pacer/pacer/statuspage/actions"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/twmb/franz-go/pkg/kgo"
)

var updateDocs = flag.Bool("update-docs", false, "rewrite the generated tables of docs/configuration.md from the code")

// docPath is the path of a file of docs/ from this package's directory.
func docPath(name string) string { return filepath.Join("..", "..", "docs", name) }

// The generated part of docs/configuration.md lies between these lines.
const (
	settingsBegin = "<!-- BEGIN settings: generated from the code by `go test ./cmd/pacer -run '^TestConfigurationDoc$' -update-docs`; edit units and meanings only -->"
	settingsEnd   = "<!-- END settings -->"
)

// docRow is one setting's row of docs/configuration.md.
type docRow struct{ name, unit, def, meaning string }

// todoMeaning marks a row the generator could not describe.
const todoMeaning = "TODO: say what this setting does"

// configDoc returns doc (the text of docs/configuration.md) with its
// settings tables made anew from the code, and the settings whose rows
// still lack a meaning. Each row's unit and meaning are kept from doc;
// variables, their order, grouping and defaults come from the code: the
// config struct and `pacer run -h` (settingsHelp) for `pacer run` and every
// channel, ingestConfig for `pacer ingest`. A setting new to doc gets the
// unit of its struct field and the meaning of its Go doc comment.
func configDoc(doc string) (string, []string, error) {
	start := strings.Index(doc, settingsBegin)
	end := strings.Index(doc, settingsEnd)
	if start < 0 || end < start {
		return "", nil, fmt.Errorf("docs/configuration.md lacks the lines %q and %q around its settings tables", settingsBegin, settingsEnd)
	}
	kept := map[string]docRow{}
	for _, line := range strings.Split(doc[start:end], "\n") {
		if r, ok := parseDocRow(line); ok {
			kept[r.name] = r
		}
	}
	comments, err := fieldComments()
	if err != nil {
		return "", nil, err
	}

	// Defaults as `pacer run -h` prints them: the config struct's, then
	// every channel's own, then PACER_CREDENTIALS_DIR.
	defs := map[string]string{}
	var helpOrder []string
	for _, m := range regexp.MustCompile(`(?m)^  (PACER_[A-Z0-9_]+) +(\S.*)$`).FindAllStringSubmatch(settingsHelp(nil), -1) {
		defs[m[1]] = strings.TrimSpace(m[2])
		helpOrder = append(helpOrder, m[1])
	}
	row := func(name, codeUnit, def string) docRow {
		r := docRow{name: name, def: def}
		if k, ok := kept[name]; ok {
			r.unit, r.meaning = k.unit, k.meaning
		}
		if r.unit == "" {
			r.unit = codeUnit
		}
		if r.meaning == "" {
			r.meaning = comments[name]
		}
		if r.meaning == "" {
			r.meaning = todoMeaning
		}
		return r
	}

	type group struct {
		title string
		rows  []docRow
	}
	var groups []group
	seen := map[string]bool{}
	var shared group
	shared.title = "Kafka, Redis, logs and pacing (`pacer run`; the Kafka, Redis and log settings serve every command)"
	for _, e := range envRows(reflect.TypeOf(config{}), nil) {
		def, ok := defs[e.name]
		if !ok {
			return "", nil, fmt.Errorf("%s is a field of config but `pacer run -h` does not list it", e.name)
		}
		shared.rows = append(shared.rows, row(e.name, e.unit, def))
		seen[e.name] = true
	}
	groups = append(groups, shared)
	for i := range channelTable {
		ch := &channelTable[i]
		g := group{title: "Channel `" + ch.name + "` (" + ch.keys + ")"}
		for _, v := range ch.variables() {
			def, ok := defs[v]
			if !ok {
				return "", nil, fmt.Errorf("%s is a variable of channel %s but `pacer run -h` does not list it", v, ch.name)
			}
			g.rows = append(g.rows, row(v, "", def))
			seen[v] = true
		}
		groups = append(groups, g)
	}
	other := group{title: "Every channel"}
	for _, v := range helpOrder {
		if !seen[v] {
			other.rows = append(other.rows, row(v, "", defs[v]))
			seen[v] = true
		}
	}
	if len(other.rows) > 0 {
		groups = append(groups, other)
	}
	ing := group{title: "`pacer ingest` (besides the Kafka, Redis and log settings above, `PACER_REDIS_FAILURE`, `PACER_EXPECTED_REPLICAS`, `PACER_IDEMPOTENCY_TTL` and `PACER_DRAIN`)"}
	for _, e := range envRows(reflect.TypeOf(ingestConfig{}), nil) {
		ing.rows = append(ing.rows, row(e.name, e.unit, e.def))
	}
	groups = append(groups, ing)
	wh := group{title: "`pacer webhook` (besides the Kafka, Redis and log settings above and `PACER_DRAIN`)"}
	for _, e := range envRows(reflect.TypeOf(webhookConfig{}), nil) {
		wh.rows = append(wh.rows, row(e.name, e.unit, e.def))
	}
	groups = append(groups, wh)

	var b strings.Builder
	b.WriteString(settingsBegin + "\n")
	var todo []string
	for _, g := range groups {
		fmt.Fprintf(&b, "\n### %s\n\n| variable | unit | default | meaning |\n|---|---|---|---|\n", g.title)
		for _, r := range g.rows {
			fmt.Fprintf(&b, "| `%s` | %s | %s | %s |\n", r.name, cell(r.unit), cell(docDefault(r.def)), cell(r.meaning))
			if r.meaning == todoMeaning {
				todo = append(todo, r.name)
			}
		}
	}
	b.WriteString("\n")
	return doc[:start] + b.String() + doc[end:], todo, nil
}

// docDefault writes a default as the doc shows it: code in backticks,
// "none" for none, words as they are.
func docDefault(def string) string {
	switch {
	case def == "(none)" || def == "":
		return "none"
	case strings.Contains(def, " "):
		return def
	default:
		return "`" + def + "`"
	}
}

// cell escapes what would end a table cell.
func cell(s string) string { return strings.ReplaceAll(s, "|", `\|`) }

// parseDocRow reads a settings row: "| `NAME` | unit | default | meaning |".
func parseDocRow(line string) (docRow, bool) {
	if !strings.HasPrefix(line, "| `PACER_") {
		return docRow{}, false
	}
	var cells []string
	var cur strings.Builder
	for i := 1; i < len(line); i++ { // after the leading "|"
		switch {
		case line[i] == '\\' && i+1 < len(line) && line[i+1] == '|':
			cur.WriteString(`\|`)
			i++
		case line[i] == '|':
			cells = append(cells, strings.TrimSpace(cur.String()))
			cur.Reset()
		default:
			cur.WriteByte(line[i])
		}
	}
	if len(cells) != 4 {
		return docRow{}, false
	}
	unesc := func(s string) string { return strings.ReplaceAll(s, `\|`, "|") }
	return docRow{name: strings.Trim(cells[0], "`"), unit: unesc(cells[1]), def: unesc(cells[2]), meaning: unesc(cells[3])}, true
}

// fieldComments returns the Go doc comment of every env-tagged struct field
// of this package, by variable, without the "PACER_X: " it starts with.
func fieldComments() (map[string]string, error) {
	files, err := filepath.Glob("*.go")
	if err != nil {
		return nil, err
	}
	out := map[string]string{}
	fset := token.NewFileSet()
	for _, name := range files {
		if strings.HasSuffix(name, "_test.go") {
			continue
		}
		f, err := parser.ParseFile(fset, name, nil, parser.ParseComments)
		if err != nil {
			return nil, err
		}
		ast.Inspect(f, func(n ast.Node) bool {
			field, ok := n.(*ast.Field)
			if !ok || field.Tag == nil || field.Doc == nil {
				return true
			}
			tag, err := strconv.Unquote(field.Tag.Value)
			if err != nil {
				return true
			}
			env, ok := reflect.StructTag(tag).Lookup("env")
			if !ok {
				return true
			}
			v := strings.TrimSpace(strings.Split(env, ",")[0])
			text := strings.Join(strings.Fields(field.Doc.Text()), " ")
			out[v] = strings.TrimPrefix(text, v+": ")
			return true
		})
	}
	return out, nil
}

// TestConfigurationDoc: docs/configuration.md's settings tables are what
// the code makes of them (every setting, its default), every setting has a
// meaning, and each secret's row names its _FILE form.
func TestConfigurationDoc(t *testing.T) {
	path := docPath("configuration.md")
	old, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	got, todo, err := configDoc(string(old))
	if err != nil {
		t.Fatal(err)
	}
	if *updateDocs {
		if err := os.WriteFile(path, []byte(got), 0o644); err != nil {
			t.Fatal(err)
		}
	} else if got != string(old) {
		t.Errorf("docs/configuration.md's settings tables differ from the code (a setting added, removed, or its default changed): %s\n"+
			"regenerate them: go test ./cmd/pacer -run '^TestConfigurationDoc$' -update-docs", firstDiff(string(old), got))
	}
	for _, v := range todo {
		t.Errorf("%s has no meaning in docs/configuration.md: write one in its row", v)
	}

	rows := map[string]docRow{}
	for _, line := range strings.Split(got, "\n") {
		if r, ok := parseDocRow(line); ok {
			rows[r.name] = r
		}
	}
	for v := range knownSettings() {
		base, isFile := strings.CutSuffix(v, "_FILE")
		if _, ok := rows[v]; ok {
			continue
		}
		if r, ok := rows[base]; isFile && ok {
			if !strings.Contains(r.meaning, "`"+v+"`") {
				t.Errorf("docs/configuration.md: the row of %s must say it may be given as `%s`", base, v)
			}
			continue
		}
		t.Errorf("docs/configuration.md lists no row for %s, which a command reads", v)
	}
}

// firstDiff says where two texts first differ, by line.
func firstDiff(a, b string) string {
	al, bl := strings.Split(a, "\n"), strings.Split(b, "\n")
	for i := 0; i < len(al) || i < len(bl); i++ {
		var x, y string
		if i < len(al) {
			x = al[i]
		}
		if i < len(bl) {
			y = bl[i]
		}
		if x != y {
			return fmt.Sprintf("line %d is\n\t%s\nwant\n\t%s", i+1, x, y)
		}
	}
	return "no difference"
}

// descRecorder is a prometheus.Registerer that keeps what each collector
// describes.
type descRecorder struct{ descs []*prometheus.Desc }

func (r *descRecorder) Register(c prometheus.Collector) error {
	ch := make(chan *prometheus.Desc)
	go func() { c.Describe(ch); close(ch) }()
	for d := range ch {
		r.descs = append(r.descs, d)
	}
	return nil
}

func (r *descRecorder) MustRegister(cs ...prometheus.Collector) {
	for _, c := range cs {
		r.Register(c)
	}
}

func (r *descRecorder) Unregister(prometheus.Collector) bool { return true }

// metricLabels is a metric's labels as docs/operations.md shows them: the
// variable labels, sorted, comma-separated.
type metricLabels struct{ variable, constant string }

var descPattern = regexp.MustCompile(`^Desc\{fqName: "([^"]+)", .*constLabels: \{([^}]*)\}, variableLabels: \{([^}]*)\}\}$`)

// labelsOf reads the descriptions r kept: metric name -> labels.
func (r *descRecorder) labelsOf(t *testing.T) map[string]metricLabels {
	t.Helper()
	out := map[string]metricLabels{}
	for _, d := range r.descs {
		m := descPattern.FindStringSubmatch(d.String())
		if m == nil {
			t.Fatalf("cannot read metric description %s", d)
		}
		var consts []string
		for _, kv := range strings.Split(m[2], ",") {
			if k, _, ok := strings.Cut(kv, "="); ok {
				consts = append(consts, k)
			}
		}
		vars := strings.Split(m[3], ",")
		if m[3] == "" {
			vars = nil
		}
		sort.Strings(vars)
		out[m[1]] = metricLabels{variable: strings.Join(vars, ","), constant: strings.Join(consts, ",")}
	}
	return out
}

// noSender is a channels.Sender that sends nothing: TestMetricsDoc builds
// a pacer only to see what it registers.
type noSender struct{}

func (noSender) Send(context.Context, channels.Message) (channels.Result, error) {
	return channels.Result{}, nil
}

// runMetrics returns the metrics `pacer run --channel whatsapp` registers
// beside Go's and the process's: the pacer's, and the Redis round trips.
func runMetrics(t *testing.T) map[string]metricLabels {
	t.Helper()
	ch := whatsappRow(t)
	cfg, err := loadConfig(func(k string) (string, bool) {
		if k == "PACER_WHATSAPP_TOKEN" {
			return "doc-token", true
		}
		return "", false
	}, ch)
	if err != nil {
		t.Fatal(err)
	}
	led := ledger.NewBatcher(nil, bucket.NewKeys(""), ledger.BatchConfig{FlushInterval: cfg.LedgerFlush, TTL: cfg.LedgerTTL})
	t.Cleanup(func() { led.Close(context.Background()) })
	rec := &descRecorder{}
	rec.MustRegister((&roundTrips{}).collector(ch.name))
	rec.MustRegister(connMetrics(ch)...)
	outcomes.NewWriter(nil, "", nil, prometheus.WrapRegistererWith(prometheus.Labels{"channel": ch.name}, rec))
	pageAuth, err := actions.NewAuth(nil, nil, false)
	if err != nil {
		t.Fatal(err)
	}
	actions.New(actions.Config{Channel: ch.name, Control: control.New(nil, bucket.NewKeys("")), Auth: pageAuth,
		Metrics: prometheus.WrapRegistererWith(prometheus.Labels{"channel": ch.name}, rec)})
	_, err = consumer.New(cfg.pacerConfig(ch), []kgo.Opt{kgo.SeedBrokers("127.0.0.1:9")},
		consumer.Deps{Bucket: bucket.New(nil, bucket.Config{}), Adapter: adapt.New(nil, bucket.Config{}), Ledger: led, Sender: noSender{}}, rec)
	if err != nil {
		t.Fatal(err)
	}
	return rec.labelsOf(t)
}

// ingestMetrics returns the metrics `pacer ingest` registers beside Go's
// and the process's.
func ingestMetrics(t *testing.T) map[string]metricLabels {
	t.Helper()
	kc, err := kgo.NewClient(kgo.SeedBrokers("127.0.0.1:9"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(kc.Close)
	rec := &descRecorder{}
	_, err = ingest.New(ingest.Config{Channels: []string{"whatsapp"}, IPLimit: bucket.Limit{PerSecond: 100, Burst: 200},
		ChannelLimit: bucket.Limit{PerSecond: 10000, Burst: 10000}},
		ingest.Deps{Kafka: kc, Quota: quota.New(nil), Keys: bucket.NewKeys(""), Tenants: func() *ingest.Tenants { return nil }}, rec)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := callback.New(callback.Config{}, nil, nil, rec); err != nil { // the callback dispatcher's
		t.Fatal(err)
	}
	return rec.labelsOf(t)
}

// webhookMetrics returns the metrics `pacer webhook` registers beyond
// the Go and process collectors: the receiver's and the outcome
// consumer's.
func webhookMetrics(t *testing.T) map[string]metricLabels {
	t.Helper()
	rec := &descRecorder{}
	webhook.New(webhook.Config{}, nil, rec)
	webhook.NewOutcomes(nil, nil, rec)
	return rec.labelsOf(t)
}

// documentedMetrics reads the metric table under heading of
// docs/operations.md: name -> variable labels ("a,b").
func documentedMetrics(t *testing.T, doc, heading string) map[string]string {
	t.Helper()
	i := strings.Index(doc, "\n"+heading+"\n")
	if i < 0 {
		t.Fatalf("docs/operations.md has no heading %q", heading)
	}
	section := doc[i+len(heading)+2:]
	if j := strings.Index(section, "\n#"); j >= 0 {
		section = section[:j]
	}
	out := map[string]string{}
	for _, m := range regexp.MustCompile("(?m)^\\| `(pacer_[a-z0-9_]+)(?:\\{([a-z_,]+)\\})?` \\|").FindAllStringSubmatch(section, -1) {
		labels := strings.Split(m[2], ",")
		if m[2] == "" {
			labels = nil
		}
		sort.Strings(labels)
		out[m[1]] = strings.Join(labels, ",")
	}
	if len(out) == 0 {
		t.Fatalf("docs/operations.md: no metric rows under %q", heading)
	}
	return out
}

// TestMetricsDoc: docs/operations.md lists every metric `pacer run` and
// `pacer ingest` register, with their labels, and no other.
func TestMetricsDoc(t *testing.T) {
	b, err := os.ReadFile(docPath("operations.md"))
	if err != nil {
		t.Fatal(err)
	}
	doc := string(b)
	for _, c := range []struct {
		heading  string
		got      map[string]metricLabels
		constant string // the constant labels every series carries
	}{
		{"### `pacer run`", runMetrics(t), "channel"},
		{"### `pacer ingest`", ingestMetrics(t), ""},
		{"### `pacer webhook`", webhookMetrics(t), ""},
	} {
		want := documentedMetrics(t, doc, c.heading)
		for name, l := range c.got {
			labels, ok := want[name]
			switch {
			case !ok:
				t.Errorf("docs/operations.md, %s: %s is registered but not documented", c.heading, name)
			case labels != l.variable:
				t.Errorf("docs/operations.md, %s: %s has labels {%s}, the doc says {%s}", c.heading, name, l.variable, labels)
			}
			if l.constant != c.constant {
				t.Errorf("%s: %s carries the constant labels {%s}; the doc says every series carries {%s}", c.heading, name, l.constant, c.constant)
			}
		}
		for name := range want {
			if _, ok := c.got[name]; !ok {
				t.Errorf("docs/operations.md, %s: %s is documented but not registered", c.heading, name)
			}
		}
	}
}

// cliHelp runs the command line args in-process and returns what it printed.
func cliHelp(t *testing.T, args ...string) string {
	t.Helper()
	var out, errOut bytes.Buffer
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if code := run(ctx, args, strings.NewReader(""), &out, &errOut, func(string) (string, bool) { return "", false }); code != 0 {
		t.Fatalf("pacer %s: exit status %d\n%s%s", strings.Join(args, " "), code, out.String(), errOut.String())
	}
	return out.String() + errOut.String()
}

// docSection returns the text of docs/commands.md under the heading that
// names `pacer <command>`, up to the next heading of its level or above.
func docSection(doc, command string) (string, bool) {
	m := regexp.MustCompile("(?m)^(#+) `pacer " + regexp.QuoteMeta(command) + "`\\s*$").FindStringSubmatchIndex(doc)
	if m == nil {
		return "", false
	}
	level := m[3] - m[2]
	rest := doc[m[1]:]
	for _, h := range regexp.MustCompile(`(?m)^(#+) `).FindAllStringSubmatchIndex(rest, -1) {
		if h[3]-h[2] <= level {
			return rest[:h[0]], true
		}
	}
	return rest, true
}

// TestCommandsDoc: docs/commands.md has a section (a heading "`pacer
// <command>`") for every command of `pacer help` and every subcommand its
// -h lists, naming every flag the (sub)command's -h prints, and no
// section for a command that does not exist.
func TestCommandsDoc(t *testing.T) {
	b, err := os.ReadFile(docPath("commands.md"))
	if err != nil {
		t.Fatal(err)
	}
	doc := string(b)
	usage := cliHelp(t, "help")
	_, list, ok := strings.Cut(usage, "commands:\n")
	if !ok {
		t.Fatalf("pacer help lists no commands:\n%s", usage)
	}
	var commands []string
	for _, m := range regexp.MustCompile(`(?m)^  ([a-z-]+)(?: [a-z]+)?  +\S`).FindAllStringSubmatch(list, -1) {
		commands = append(commands, m[1])
	}
	if len(commands) < 8 {
		t.Fatalf("read %d commands from pacer help; the pattern no longer matches it:\n%s", len(commands), usage)
	}
	subcommand := regexp.MustCompile(`(?m)^  ([a-z]+)  +\S`)
	flagLine := regexp.MustCompile(`(?m)^  -([a-z][a-z0-9-]*)`)
	var leaves []string
	for _, c := range commands {
		if c == "version" {
			leaves = append(leaves, c)
			continue
		}
		help := cliHelp(t, c, "-h")
		_, subs, ok := strings.Cut(help, "subcommands:\n")
		if !ok {
			leaves = append(leaves, c)
			if _, ok := docSection(doc, c); !ok {
				t.Errorf("docs/commands.md has no section `pacer %s`", c)
			}
			continue
		}
		if _, ok := docSection(doc, c); !ok {
			t.Errorf("docs/commands.md has no section `pacer %s`", c)
		}
		for _, m := range subcommand.FindAllStringSubmatch(subs, -1) {
			leaves = append(leaves, c+" "+m[1])
		}
	}
	for _, c := range leaves {
		section, ok := docSection(doc, c)
		if !ok {
			t.Errorf("docs/commands.md has no section `pacer %s`", c)
			continue
		}
		if c == "version" {
			continue
		}
		for _, m := range flagLine.FindAllStringSubmatch(cliHelp(t, append(strings.Fields(c), "-h")...), -1) {
			if !strings.Contains(section, "`--"+m[1]) && !strings.Contains(section, "`-"+m[1]) {
				t.Errorf("docs/commands.md, `pacer %s`: the flag --%s is not documented", c, m[1])
			}
		}
	}
	// No section for a command that does not exist.
	for _, m := range regexp.MustCompile("(?m)^#+ `pacer ([a-z -]+)`\\s*$").FindAllStringSubmatch(doc, -1) {
		if !slices.Contains(leaves, m[1]) && !slices.Contains(commands, m[1]) {
			t.Errorf("docs/commands.md documents `pacer %s`, which pacer help does not list", m[1])
		}
	}
}

// headingSlug is the anchor GitHub gives a Markdown heading: lower case,
// punctuation dropped, spaces as hyphens.
func headingSlug(h string) string {
	var b strings.Builder
	for _, r := range strings.ToLower(strings.TrimSpace(h)) {
		switch {
		case r == ' ':
			b.WriteByte('-')
		case r == '-' || r == '_' || (r >= 'a' && r <= 'z') || (r >= '0' && r <= '9'):
			b.WriteRune(r)
		}
	}
	return b.String()
}

// TestDocLinks: every relative link of README.md, BENCHMARKS.md and the
// Markdown files under docs/ leads to a file or directory that exists and,
// when it names an anchor, to a heading of that file.
func TestDocLinks(t *testing.T) {
	files := append(docFiles(t), filepath.Join("..", "..", "BENCHMARKS.md"))
	anchors := map[string]map[string]bool{} // file -> heading slugs
	slugs := func(path string) map[string]bool {
		if a, ok := anchors[path]; ok {
			return a
		}
		a := map[string]bool{}
		if b, err := os.ReadFile(path); err == nil {
			inCode := false
			for _, line := range strings.Split(string(b), "\n") {
				if strings.HasPrefix(line, "```") {
					inCode = !inCode
				}
				if h, ok := strings.CutPrefix(strings.TrimLeft(line, "#"), " "); ok && !inCode && strings.HasPrefix(line, "#") {
					a[headingSlug(h)] = true
				}
			}
		}
		anchors[path] = a
		return a
	}
	link := regexp.MustCompile(`\]\(([^)\s]+)\)`)
	checked := 0
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range link.FindAllStringSubmatch(string(b), -1) {
			target := m[1]
			if strings.Contains(target, "://") || strings.HasPrefix(target, "mailto:") {
				continue
			}
			path, anchor, _ := strings.Cut(target, "#")
			dest := f
			if path != "" {
				dest = filepath.Join(filepath.Dir(f), path)
				if _, err := os.Stat(dest); err != nil {
					t.Errorf("%s: link %s: no such file", f, target)
					continue
				}
			}
			if anchor != "" && !slugs(dest)[anchor] {
				t.Errorf("%s: link %s: %s has no heading #%s", f, target, dest, anchor)
			}
			checked++
		}
	}
	if checked < 50 {
		t.Fatalf("checked %d links; the pattern no longer finds them", checked)
	}
}

// docFiles returns README.md and the Markdown files under docs/.
func docFiles(t *testing.T) []string {
	t.Helper()
	root := filepath.Join("..", "..")
	files := []string{filepath.Join(root, "README.md")}
	err := filepath.WalkDir(filepath.Join(root, "docs"), func(path string, d fs.DirEntry, err error) error {
		if err == nil && !d.IsDir() && strings.HasSuffix(path, ".md") {
			files = append(files, path)
		}
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	return files
}

// TestDocCommandLines: each pacer command line in a code block of README.md
// and docs/ (fenced, or indented by four spaces) runs a command of `pacer
// help`, a subcommand its -h lists, and only flags its -h prints.
func TestDocCommandLines(t *testing.T) {
	invocation := regexp.MustCompile(`(?:^|[\s;&(])(?:bin/pacer|go run \./cmd/pacer|pacer) ([a-z][a-z-]*)(.*)$`)
	flags := map[string]map[string]bool{} // command line ("limit set") -> its flags
	flagsOf := func(cmd string) map[string]bool {
		if f, ok := flags[cmd]; ok {
			return f
		}
		f := map[string]bool{}
		for _, m := range regexp.MustCompile(`(?m)^  -([a-z][a-z0-9-]*)`).FindAllStringSubmatch(cliHelp(t, append(strings.Fields(cmd), "-h")...), -1) {
			f[m[1]] = true
		}
		flags[cmd] = f
		return f
	}
	usage := cliHelp(t, "help")
	checked := 0
	for _, f := range docFiles(t) {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		fenced := false
		for i, line := range strings.Split(string(b), "\n") {
			if strings.HasPrefix(line, "```") {
				fenced = !fenced
				continue
			}
			if !fenced && !strings.HasPrefix(line, "    ") {
				continue
			}
			if c := regexp.MustCompile(`(^|\s)#`).FindStringIndex(line); c != nil {
				line = line[:c[0]] // a shell comment
			}
			m := invocation.FindStringSubmatch(line)
			if m == nil {
				continue
			}
			where := fmt.Sprintf("%s:%d", f, i+1)
			cmd, rest := m[1], strings.Fields(m[2])
			if !regexp.MustCompile(`(?m)^  ` + regexp.QuoteMeta(cmd) + `[ ]`).MatchString(usage) {
				t.Errorf("%s: pacer %s: pacer help lists no such command", where, cmd)
				continue
			}
			if _, subs, ok := strings.Cut(cliHelp(t, cmd, "-h"), "subcommands:\n"); ok {
				if len(rest) == 0 || !regexp.MustCompile(`(?m)^  `+regexp.QuoteMeta(rest[0])+`  `).MatchString(subs) {
					t.Errorf("%s: pacer %s: no such subcommand %v", where, cmd, rest)
					continue
				}
				cmd, rest = cmd+" "+rest[0], rest[1:]
			}
			known := flagsOf(cmd)
			for _, w := range rest {
				if strings.ContainsAny(w[:1], "&|#<>2") {
					break // the shell's: a redirection, a pipe, a comment
				}
				w = strings.Trim(w, "[]")
				name, isFlag := strings.CutPrefix(w, "-")
				if !isFlag || name == "" || name == "-" {
					continue
				}
				name, _, _ = strings.Cut(strings.TrimPrefix(name, "-"), "=")
				if !known[name] {
					t.Errorf("%s: pacer %s has no flag -%s", where, cmd, name)
				}
			}
			checked++
		}
	}
	if checked < 20 {
		t.Fatalf("checked %d command lines; the pattern no longer finds them", checked)
	}
	t.Logf("checked %d command lines", checked)
}

// TestRedisKeysDoc: every Redis key that bucket.Keys names (each of its
// methods returning a key) has a row in docs/architecture.md's key tables.
// Each method is called with a placeholder for every argument, and the key
// it returns, placeholders read as "anything", must match a documented key.
func TestRedisKeysDoc(t *testing.T) {
	b, err := os.ReadFile(docPath("architecture.md"))
	if err != nil {
		t.Fatal(err)
	}
	var documented []string
	for _, m := range regexp.MustCompile("(?m)^\\| `(pacer:[^`]+)` \\|").FindAllStringSubmatch(string(b), -1) {
		documented = append(documented, m[1])
	}
	if len(documented) < 20 {
		t.Fatalf("found %d keys in docs/architecture.md; the pattern no longer matches its tables", len(documented))
	}
	const mark = "QQQ"
	k := reflect.ValueOf(bucket.NewKeys(""))
	named := 0
	for i := range k.NumMethod() {
		m, name := k.Method(i), k.Type().Method(i).Name
		mt := m.Type()
		if mt.NumIn() == 0 || mt.NumOut() != 1 || mt.Out(0).Kind() != reflect.String {
			continue
		}
		args := make([]reflect.Value, mt.NumIn())
		for j := range args {
			switch mt.In(j).Kind() {
			case reflect.String:
				args[j] = reflect.ValueOf(mark).Convert(mt.In(j))
			case reflect.Int, reflect.Int32, reflect.Int64:
				args[j] = reflect.ValueOf(777).Convert(mt.In(j))
			default:
				t.Fatalf("Keys.%s takes a %s: teach this test its placeholder", name, mt.In(j))
			}
		}
		key := m.Call(args)[0].String()
		pattern := regexp.QuoteMeta(key)
		pattern = strings.NewReplacer(mark, ".+", "777", ".+").Replace(pattern)
		re := regexp.MustCompile("^" + pattern + "$")
		found := false
		for _, d := range documented {
			if re.MatchString(d) {
				found = true
				break
			}
		}
		if !found {
			t.Errorf("docs/architecture.md lists no key like %s (Keys.%s)", key, name)
		}
		named++
	}
	if named < 10 {
		t.Fatalf("called %d methods of bucket.Keys; the test no longer finds them", named)
	}
}
