package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/pacerhq/pacer/bucket"
	"github.com/pacerhq/pacer/internal/testenv"
	"github.com/pacerhq/pacer/pacer/control"
	"github.com/redis/go-redis/v9"
)

// operatorEnv is the environment of an operator command on the test
// Redis, under a prefix of its own.
func operatorEnv(t *testing.T) (map[string]string, *control.Store) {
	t.Helper()
	url := testenv.RedisURL(t)
	prefix := fmt.Sprintf("optest%d", time.Now().UnixNano())
	opt, err := redis.ParseURL(url)
	if err != nil {
		t.Fatal(err)
	}
	rdb := redis.NewClient(opt)
	t.Cleanup(func() { rdb.Close() })
	return map[string]string{"PACER_REDIS_URL": url, "PACER_REDIS_PREFIX": prefix}, control.New(rdb, bucket.NewKeys(prefix))
}

func runCLI(env map[string]string, args ...string) (int, string, string) {
	var out, errb bytes.Buffer
	code := run(context.Background(), args, strings.NewReader(""), &out, &errb, lookupMap(env))
	return code, out.String(), errb.String()
}

// TestCampaignUnknownRefused: pause, resume or cancel of a campaign Redis
// knows nothing of is refused (a typo would otherwise cancel a later
// campaign of that name) unless --force, and so is its status, in text and
// JSON; flags of another verb are refused.
func TestCampaignUnknownRefused(t *testing.T) {
	env, st := operatorEnv(t)
	for _, verb := range []string{"pause", "resume", "cancel"} {
		code, _, errs := runCLI(env, "campaign", verb, "--channel", "whatsapp", "--campaign", "sprnig")
		if code != 2 || !strings.Contains(errs, "sprnig") || !strings.Contains(errs, "not known") || !strings.Contains(errs, "--force") {
			t.Errorf("campaign %s of an unknown campaign: exit %d, %q; want 2 naming it and --force", verb, code, errs)
		}
	}
	if known, err := st.Known(context.Background(), "whatsapp", "sprnig"); err != nil || known {
		t.Fatalf("the refused commands stored state: known=%v err=%v", known, err)
	}
	// status of a campaign Redis knows nothing of is refused the same way
	// (exit 2, the name in the message), in text and JSON, printing nothing
	// on stdout: it used to exit 0 with state "unknown", which a script
	// could not tell from a real campaign.
	for _, args := range [][]string{{}, {"--json"}} {
		code, out, errs := runCLI(env, append([]string{"campaign", "status", "--channel", "whatsapp", "--campaign", "sprnig"}, args...)...)
		if code != 2 || out != "" || !strings.Contains(errs, "campaign status: campaign sprnig of whatsapp is not known") {
			t.Errorf("status %v of an unknown campaign: exit %d, stdout %q, stderr %q; want 2 naming it, nothing on stdout", args, code, out, errs)
		}
	}
	// --force: the operator means a campaign not yet published.
	if code, out, errs := runCLI(env, "campaign", "pause", "--channel", "whatsapp", "--campaign", "later", "--force"); code != 0 || !strings.Contains(out, "paused") {
		t.Fatalf("pause --force: exit %d, %q %q", code, out, errs)
	}
	// A campaign with published records is known.
	if err := st.AddPublished(context.Background(), "whatsapp", map[string]int64{"spring": 3}); err != nil {
		t.Fatal(err)
	}
	if code, _, errs := runCLI(env, "campaign", "cancel", "--channel", "whatsapp", "--campaign", "spring"); code != 0 {
		t.Fatalf("cancel of a published campaign: exit %d, %q", code, errs)
	}
	var js map[string]any
	code, out, _ := runCLI(env, "campaign", "status", "--channel", "whatsapp", "--campaign", "spring", "--json")
	if err := json.Unmarshal([]byte(out), &js); code != 0 || err != nil || js["state"] != "cancelled" || js["published"] != float64(3) {
		t.Errorf("status --json of a cancelled campaign: exit %d, %s", code, out)
	}
	// Flags of another verb, and the empty campaign (no campaign).
	for _, args := range [][]string{
		{"campaign", "pause", "--channel", "whatsapp", "--campaign", "spring", "--json"},
		{"campaign", "status", "--channel", "whatsapp", "--campaign", "spring", "--force"},
		{"campaign", "status", "--channel", "whatsapp", "--campaign", ""},
	} {
		if code, _, errs := runCLI(env, args...); code != 2 {
			t.Errorf("pacer %v: exit %d, %q; want 2", args, code, errs)
		}
	}
}

// TestCampaignDone: a running campaign whose published records are all
// delivered, dead-lettered or skipped reads done, in text and JSON, and
// running again once more of it is published; a paused one stays paused.
func TestCampaignDone(t *testing.T) {
	env, st := operatorEnv(t)
	ctx := context.Background()
	state := func() (string, string) {
		t.Helper()
		code, out, errs := runCLI(env, "campaign", "status", "--channel", "whatsapp", "--campaign", "fall", "--json")
		var js struct {
			State     string `json:"state"`
			Remaining *int64 `json:"remaining"`
		}
		if err := json.Unmarshal([]byte(out), &js); code != 0 || err != nil || js.Remaining == nil {
			t.Fatalf("status --json: exit %d, %q %q", code, out, errs)
		}
		_, text, _ := runCLI(env, "campaign", "status", "--channel", "whatsapp", "--campaign", "fall")
		return js.State + " " + strconv.FormatInt(*js.Remaining, 10), strings.SplitN(text, "\n", 2)[0]
	}
	if err := st.AddPublished(ctx, "whatsapp", map[string]int64{"fall": 5}); err != nil {
		t.Fatal(err)
	}
	if err := st.Add(ctx, "whatsapp", map[string]*control.Counts{"fall": {Delivered: 3, DeadLetters: map[string]int64{"permanent": 1}}}); err != nil {
		t.Fatal(err)
	}
	if js, text := state(); js != "running 1" || text != "campaign fall of whatsapp: running" {
		t.Errorf("one remaining: %q, %q; want running", js, text)
	}
	if err := st.Add(ctx, "whatsapp", map[string]*control.Counts{"fall": {Duplicates: 1}}); err != nil {
		t.Fatal(err)
	}
	if js, text := state(); js != "done 0" || text != "campaign fall of whatsapp: done" {
		t.Errorf("nothing remaining: %q, %q; want done", js, text)
	}
	if err := st.AddPublished(ctx, "whatsapp", map[string]int64{"fall": 2}); err != nil {
		t.Fatal(err)
	}
	if js, _ := state(); js != "running 2" {
		t.Errorf("two more published: %q; want running again", js)
	}
	if _, err := st.SetState(ctx, "whatsapp", "fall", control.Paused); err != nil {
		t.Fatal(err)
	}
	if err := st.Add(ctx, "whatsapp", map[string]*control.Counts{"fall": {Delivered: 2}}); err != nil {
		t.Fatal(err)
	}
	if js, _ := state(); js != "paused 0" {
		t.Errorf("paused, nothing remaining: %q; want paused", js)
	}
}

// TestCampaignRepublishedAfterFix: a file of 5 lines with one bad one,
// published, fixed and published again, counts 9 records in published (4
// good lines twice, then 5) and, once the pacer skipped the 4 copies as
// duplicates, 5 messages: the status says published counts records and
// gives the distinct ids as messages, in text and JSON.
func TestCampaignRepublishedAfterFix(t *testing.T) {
	env, st := operatorEnv(t)
	ctx := context.Background()
	for _, n := range []int64{4, 5} {
		if err := st.AddPublished(ctx, "whatsapp", map[string]int64{"fixed": n}); err != nil {
			t.Fatal(err)
		}
	}
	if err := st.Add(ctx, "whatsapp", map[string]*control.Counts{"fixed": {Delivered: 5, Duplicates: 4}}); err != nil {
		t.Fatal(err)
	}
	code, text, errs := runCLI(env, "campaign", "status", "--channel", "whatsapp", "--campaign", "fixed")
	if code != 0 || !strings.Contains(text, "  published     9 records (an id published again counts again)\n") ||
		!strings.Contains(text, "  messages      5 (published less duplicates") || !strings.Contains(text, "  remaining     0\n") {
		t.Errorf("status: exit %d, %q %q; want 9 records published, 5 messages, 0 remaining", code, text, errs)
	}
	var js struct {
		Published, Messages *int64
	}
	_, out, _ := runCLI(env, "campaign", "status", "--channel", "whatsapp", "--campaign", "fixed", "--json")
	if err := json.Unmarshal([]byte(out), &js); err != nil || js.Published == nil || *js.Published != 9 || js.Messages == nil || *js.Messages != 5 {
		t.Errorf("status --json: %s; want published 9, messages 5", out)
	}
}

// TestOperatorOutputEscapesControlCharacters: a campaign name or pacing
// key comes from tenants; printed to the operator's terminal its control
// characters are escaped, never written raw.
func TestOperatorOutputEscapesControlCharacters(t *testing.T) {
	env, st := operatorEnv(t)
	evil := "x\x1b[2J\nforged line"
	if err := st.AddPublished(context.Background(), "whatsapp", map[string]int64{evil: 1}); err != nil {
		t.Fatal(err)
	}
	code, out, errs := runCLI(env, "campaign", "status", "--channel", "whatsapp", "--campaign", evil)
	if code != 0 || strings.ContainsAny(out, "\x1b") || strings.Contains(out, "\nforged") || !strings.Contains(out, `"x\x1b[2J\nforged line"`) {
		t.Errorf("campaign status: exit %d, %q %q; want the name escaped", code, out, errs)
	}
	// A pacing key is quoted the same way by every limit verb.
	for _, args := range [][]string{
		{"limit", "get", "--channel", "whatsapp", "--key", evil},   // none set yet
		{"limit", "unset", "--channel", "whatsapp", "--key", evil}, // none to remove
		{"limit", "set", "--channel", "whatsapp", "--key", evil, "--rate", "5"},
		{"limit", "get", "--channel", "whatsapp", "--key", evil},
		{"limit", "unset", "--channel", "whatsapp", "--key", evil},
	} {
		code, out, errs := runCLI(env, args...)
		if code != 0 || strings.ContainsAny(out, "\x1b") || strings.Contains(out, "\nforged") || !strings.Contains(out, `"x\x1b[2J\nforged line"`) {
			t.Errorf("pacer %s: exit %d, %q %q; want the key escaped", args[1], code, out, errs)
		}
	}
	if quoteText("spring sale 2026 ✓") != "spring sale 2026 ✓" {
		t.Errorf("a printable name is changed: %q", quoteText("spring sale 2026 ✓"))
	}
}

// TestSubcommandHelpListsOnlyItsFlags: -h of a verb lists the flags that
// verb takes, and the others are refused.
func TestSubcommandHelpListsOnlyItsFlags(t *testing.T) {
	for _, c := range []struct {
		args       []string
		want, nope []string
	}{
		{[]string{"limit", "get", "-h"}, []string{"-key"}, []string{"-rate", "-burst"}},
		{[]string{"limit", "unset", "-h"}, []string{"-key"}, []string{"-rate", "-burst"}},
		{[]string{"limit", "set", "-h"}, []string{"-rate", "-burst"}, nil},
		{[]string{"campaign", "pause", "-h"}, []string{"-campaign", "-force"}, []string{"-json"}},
		{[]string{"campaign", "status", "-h"}, []string{"-json"}, []string{"-force"}},
	} {
		code, out, errs := runCLI(nil, c.args...)
		all := out + errs
		if code != 0 {
			t.Errorf("%v: exit %d", c.args, code)
		}
		for _, w := range c.want {
			if !regexp.MustCompile(`(?m)^  ` + w + `\b`).MatchString(all) {
				t.Errorf("%v does not list %s:\n%s", c.args, w, all)
			}
		}
		for _, n := range c.nope {
			if regexp.MustCompile(`(?m)^  ` + n + `\b`).MatchString(all) {
				t.Errorf("%v lists %s, which it does not take:\n%s", c.args, n, all)
			}
		}
	}
	if code, _, errs := runCLI(nil, "limit", "get", "--channel", "whatsapp", "--rate", "5"); code != 2 || !strings.Contains(errs, "rate") {
		t.Errorf("limit get --rate: exit %d, %q; want 2 naming the flag", code, errs)
	}
}

// TestStatusEscapesKeys: pacer status prints a pacing key with control
// characters quoted, and a key without state as idle.
func TestStatusEscapesKeys(t *testing.T) {
	env, _ := operatorEnv(t)
	code, out, errs := runCLI(env, "status", "--channel", "whatsapp", "--key", "k\x1b]0;owned\x07\r")
	if code != 0 || strings.ContainsAny(out, "\x1b\x07\r") || !strings.Contains(out, `"k\x1b]0;owned\a\r"`) {
		t.Errorf("status --key: exit %d, %q %q; want the key escaped", code, out, errs)
	}
	if !strings.Contains(out, "idle") || !strings.Contains(out, "from this shell's PACER_* settings") {
		t.Errorf("status of a key without state, no pacer running: %q; want it idle and the limit's source named", out)
	}
}

// TestRedisTLSMismatchNamesTheSetting: a plain client on Redis's TLS port,
// and a TLS client on its plain port, get an error naming the settings to
// look at, not a bare EOF or deadline.
func TestRedisTLSMismatchNamesTheSetting(t *testing.T) {
	sec := testenv.RedisSecure(t)
	plain := testenv.RedisAddr(t)
	for _, c := range []struct {
		name string
		env  map[string]string
		want string
	}{
		{"plain client, TLS port", map[string]string{"PACER_REDIS_URL": "redis://" + sec.TLSAddr + "/0"},
			"if that port expects TLS, set PACER_REDIS_TLS=true or use rediss:// in PACER_REDIS_URL (PACER_REDIS_URL host " + sec.TLSAddr + ")"},
		{"TLS client, plain port", map[string]string{"PACER_REDIS_URL": "rediss://" + plain + "/0", "PACER_REDIS_TLS_CA_FILE": sec.CAFile},
			"if that port is not a TLS port, unset PACER_REDIS_TLS or use redis:// in PACER_REDIS_URL"},
	} {
		for _, args := range [][]string{{"status", "--channel", "whatsapp"}, {"limit", "get", "--channel", "whatsapp"}} {
			code, _, errs := runCLI(c.env, args...)
			if code != 1 || !strings.Contains(errs, c.want) {
				t.Errorf("%s, %v: exit %d, %q; want 1 and %q", c.name, args, code, errs, c.want)
			}
		}
	}
}

// TestPublishedCountedAfterInterrupt: the records a publish wrote before
// Ctrl-C (its context ended) are counted for their campaign, so `campaign
// status` knows the campaign and its remaining work.
func TestPublishedCountedAfterInterrupt(t *testing.T) {
	env, st := operatorEnv(t)
	cfg, err := loadConfig(lookupMap(env), whatsappRow(t))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel() // interrupted
	var errb bytes.Buffer
	countPublished(ctx, cfg, "whatsapp", map[string]int{"pint": 304}, &errb)
	s, err := st.CampaignStatus(context.Background(), "whatsapp", "pint")
	if err != nil || s.Published != 304 {
		t.Errorf("after an interrupted publish: published %d (err %v, stderr %q), want 304", s.Published, err, errb.String())
	}
}

// TestCampaignStatusNoETAWhilePaused: a paused campaign sends nothing, so
// it has no ETA (text "none (paused)", JSON null); running again, it has.
func TestCampaignStatusNoETAWhilePaused(t *testing.T) {
	env, st := operatorEnv(t)
	ctx := context.Background()
	if err := st.AddPublished(ctx, "whatsapp", map[string]int64{"spring": 10}); err != nil {
		t.Fatal(err)
	}
	now := time.Now().UnixMilli()
	if err := st.Add(ctx, "whatsapp", map[string]*control.Counts{"spring": {Delivered: 3, First: now - 2000, Last: now}}); err != nil {
		t.Fatal(err)
	}
	eta := func(want string, wantJSON bool) {
		t.Helper()
		code, out, errs := runCLI(env, "campaign", "status", "--channel", "whatsapp", "--campaign", "spring")
		if code != 0 || !strings.Contains(out, "  eta           "+want+"\n") {
			t.Errorf("status: exit %d, %q %q; want eta %s", code, out, errs, want)
		}
		code, out, _ = runCLI(env, "campaign", "status", "--channel", "whatsapp", "--campaign", "spring", "--json")
		var js map[string]any
		if err := json.Unmarshal([]byte(out), &js); code != 0 || err != nil || (js["eta_seconds"] != nil) != wantJSON {
			t.Errorf("status --json: exit %d, %s; want eta_seconds present=%v", code, out, wantJSON)
		}
	}
	eta("7s", true) // 7 remaining at 1 msg/s
	if code, _, errs := runCLI(env, "campaign", "pause", "--channel", "whatsapp", "--campaign", "spring"); code != 0 {
		t.Fatalf("pause: exit %d, %q", code, errs)
	}
	eta("none (paused)", false)
	if code, _, errs := runCLI(env, "campaign", "resume", "--channel", "whatsapp", "--campaign", "spring"); code != 0 {
		t.Fatalf("resume: exit %d, %q", code, errs)
	}
	eta("7s", true)
}
