package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"slices"
	"sort"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/pacerhq/pacer/bucket"
	"github.com/pacerhq/pacer/pacer/control"
	"github.com/pacerhq/pacer/pacer/operate"
)

// controlStore opens the run-time control store of ch's Redis, as
// commandRedis opens the client. The func closes the store.
func controlStore(ctx context.Context, lookup func(string) (string, bool), ch *channel, cmd string) (config, *control.Store, func(), error) {
	cfg, rdb, err := commandRedis(ctx, lookup, ch, cmd)
	if err != nil {
		return cfg, nil, nil, err
	}
	return cfg, control.New(rdb, bucket.NewKeys(cfg.RedisPrefix)), func() { rdb.Close() }, nil
}

const limitUsage = `usage: pacer limit set   --channel C --key K --rate R [--burst B]
       pacer limit get   --channel C [--key K]
       pacer limit unset --channel C --key K`

// cmdLimit sets, shows and removes per-key limits: the key's ceiling (for
// the bucket and the AIMD) applied by every running pacer within about a
// second. Every change is logged with the old and new values.
func cmdLimit(ctx context.Context, args []string, stdout, stderr io.Writer, lookup func(string) (string, bool)) error {
	verb, fs, channel, err := verbCommand(args, stdout, stderr, "limit", limitUsage, [][2]string{
		{"set", "give a pacing key a rate (and burst) of its own; running pacers apply it within about 1 s"},
		{"get", "show a key's limit, or every key of the channel that has one"},
		{"unset", "remove a key's limit: the channel's applies again"},
	})
	if err != nil {
		return err
	}
	key := fs.String("key", "", "pacing key (for WhatsApp the phone-number ID)")
	// --rate and --burst exist for set only: get and unset refuse them as
	// unknown flags and do not list them in -h.
	rate, burst := new(string), new(string)
	if verb == "set" {
		fs.StringVar(rate, "rate", "", fmt.Sprintf("the key's rate in msgs/s (>= %.6g, one a day; <= %.6g)", control.MinKeyRate, control.MaxKeyRate))
		fs.StringVar(burst, "burst", "", "the key's burst in messages (>= 1); default the channel's")
	}
	ch, err := parseChannelFlags(fs, args[1:], channel)
	if err != nil {
		return err
	}
	if verb != "get" && strings.TrimSpace(*key) == "" {
		return &usageError{"limit " + verb + ": --key is required"}
	}
	var kl control.KeyLimit
	if verb == "set" {
		if kl, err = operate.ParseLimit(*key, *rate, *burst); err != nil {
			return operateUsage("limit set", err)
		}
	}
	cfg, st, closeFn, err := controlStore(ctx, lookup, ch, "limit "+verb)
	if err != nil {
		return err
	}
	defer closeFn()
	log := newLogger(cfg, stderr)
	show := func(l control.KeyLimit) string {
		if l.Burst == 0 {
			return fmt.Sprintf("%.6g msgs/s, burst the channel's", l.PerSecond)
		}
		return fmt.Sprintf("%.6g msgs/s, burst %d", l.PerSecond, l.Burst)
	}
	switch verb {
	case "set":
		old, had, err := operate.SetLimit(ctx, st, log, "", *channel, kl)
		if err != nil {
			return fmt.Errorf("limit set: %w", err)
		}
		was := "the channel's"
		if had {
			was = show(old)
		}
		fmt.Fprintf(stdout, "%s %s: %s (was %s); running pacers apply it within about 1 s\n", *channel, quoteText(*key), show(kl), was)
	case "unset":
		old, had, err := operate.UnsetLimit(ctx, st, log, "", *channel, *key)
		if err != nil {
			return fmt.Errorf("limit unset: %w", err)
		}
		if !had {
			fmt.Fprintf(stdout, "%s %s: no limit was set; the channel's applies\n", *channel, quoteText(*key))
		} else {
			fmt.Fprintf(stdout, "%s %s: limit %s removed; the channel's applies again within about 1 s\n", *channel, quoteText(*key), show(old))
		}
	case "get":
		var ls []control.KeyLimit
		if *key != "" {
			l, ok, err := st.Limit(ctx, *channel, *key)
			if err != nil {
				return fmt.Errorf("limit get: %w", err)
			}
			if !ok {
				fmt.Fprintf(stdout, "%s %s: no limit set; the channel's applies\n", *channel, quoteText(*key))
				return nil
			}
			ls = []control.KeyLimit{l}
		} else if ls, err = st.Limits(ctx, *channel); err != nil {
			return fmt.Errorf("limit get: %w", err)
		}
		tw := tabwriter.NewWriter(stdout, 0, 0, 2, ' ', 0)
		fmt.Fprintln(tw, "KEY\tRATE/S\tBURST")
		for _, l := range ls {
			b := "channel's"
			if l.Burst > 0 {
				b = strconv.Itoa(l.Burst)
			}
			fmt.Fprintf(tw, "%s\t%.6g\t%s\n", quoteText(l.Key), l.PerSecond, b)
		}
		tw.Flush()
		fmt.Fprintf(stdout, "%d key(s) of channel %s with a limit set\n", len(ls), *channel)
	}
	return nil
}

// operateUsage turns a refused field of package operate into the usage
// error (exit status 2) of command cmd naming its flag.
func operateUsage(cmd string, err error) error {
	if fe, ok := operate.IsFieldError(err); ok {
		return &usageError{fmt.Sprintf("%s: --%s %s", cmd, fe.Field, fe.Problem)}
	}
	return err
}

const campaignUsage = `usage: pacer campaign pause|resume|cancel --channel C --campaign X
       pacer campaign status --channel C --campaign X [--json]`

// cmdCampaign pauses, resumes or cancels a campaign on every running pacer
// (within about a second), or shows its progress.
func cmdCampaign(ctx context.Context, args []string, stdout, stderr io.Writer, lookup func(string) (string, bool)) error {
	verb, fs, channel, err := verbCommand(args, stdout, stderr, "campaign", campaignUsage, [][2]string{
		{"pause", "hold a campaign's records on every running pacer, without an attempt"},
		{"resume", "send a paused campaign's records again"},
		{"cancel", "send a campaign's records to the DLQ with reason cancelled"},
		{"status", "a campaign's progress: published, delivered, dead-lettered, remaining, rate, ETA"},
	})
	if err != nil {
		return err
	}
	// The state the verb sets; status sets none.
	want := map[string]control.State{"pause": control.Paused, "resume": control.Running, "cancel": control.Cancelled}[verb]
	campaign := fs.String("campaign", "", "the envelopes' campaign (required; an envelope without one, or with \"\", has no campaign)")
	// Each verb has only its own flags: another verb's is refused as unknown.
	asJSON, force := new(bool), new(bool)
	if verb == "status" {
		fs.BoolVar(asJSON, "json", false, "print JSON")
	} else {
		fs.BoolVar(force, "force", false, "set the state of a campaign Redis does not know yet (none of its records published or sent so far)")
	}
	ch, err := parseChannelFlags(fs, args[1:], channel)
	if err != nil {
		return err
	}
	if *campaign == "" {
		return &usageError{"campaign " + verb + ": --campaign is required (an empty campaign is no campaign)"}
	}
	cfg, st, closeFn, err := controlStore(ctx, lookup, ch, "campaign "+verb)
	if err != nil {
		return err
	}
	defer closeFn()
	if verb != "status" {
		old, err := operate.SetCampaignState(ctx, st, newLogger(cfg, stderr), "", *channel, *campaign, want, *force)
		if errors.Is(err, operate.ErrUnknownCampaign) {
			return unknownCampaign(verb, *campaign, *channel, ", or add --force to set the state of a campaign not yet published")
		}
		if err != nil {
			return fmt.Errorf("campaign %s: %w", verb, err)
		}
		name := operate.StateName
		fmt.Fprintf(stdout, "campaign %s of %s: %s (was %s); running pacers apply it within about 1 s\n", quoteText(*campaign), *channel, name(want), name(old))
		if want == control.Cancelled {
			fmt.Fprintf(stdout, "its records go to the DLQ with reason cancelled; pacer dlq replay --channel %s --reason cancelled --campaign %s puts them back\n", *channel, quoteText(*campaign))
		}
		return nil
	}
	s, known, err := st.Find(ctx, *channel, *campaign)
	if err != nil {
		return fmt.Errorf("campaign status: %w", err)
	}
	if !known {
		return unknownCampaign(verb, *campaign, *channel, "")
	}
	if *asJSON {
		enc := json.NewEncoder(stdout)
		enc.SetIndent("", "  ")
		return enc.Encode(s.JSON())
	}
	unknown := func(n int64) string {
		if n < 0 {
			return "unknown"
		}
		return strconv.FormatInt(n, 10)
	}
	fmt.Fprintf(stdout, "campaign %s of %s: %s\n", quoteText(s.Campaign), *channel, s.State)
	if s.Tenant != "" {
		fmt.Fprintf(stdout, "  tenant        %s (published through the ingest API)\n", s.Tenant)
	}
	// published counts records: a file published again after a fix
	// counts its good lines twice there; messages is the distinct ids,
	// once the pacer skipped the copies as duplicates.
	pub, msgs := "unknown", "unknown"
	if s.Published >= 0 {
		pub = fmt.Sprintf("%d records (an id published again counts again)", s.Published)
		msgs = fmt.Sprintf("%d (published less duplicates: its distinct ids, exact once remaining is 0)", s.Messages)
	}
	fmt.Fprintf(stdout, "  published     %s\n", pub)
	fmt.Fprintf(stdout, "  messages      %s\n", msgs)
	fmt.Fprintf(stdout, "  delivered     %d\n", s.Delivered)
	reasons := make([]string, 0, len(s.DeadLetters))
	total := int64(0)
	for r, n := range s.DeadLetters {
		reasons = append(reasons, r)
		total += n
	}
	sort.Strings(reasons)
	fmt.Fprintf(stdout, "  dead-lettered %d\n", total)
	for _, r := range reasons {
		fmt.Fprintf(stdout, "    %-20s %d\n", r, s.DeadLetters[r])
	}
	fmt.Fprintf(stdout, "  duplicates    %d\n", s.Duplicates)
	writeOutcomes(stdout, s)
	fmt.Fprintf(stdout, "  remaining     %s\n", unknown(s.Remaining))
	fmt.Fprintf(stdout, "  rate          %.1f msgs/s\n", s.Rate)
	eta := "unknown"
	if s.State == string(control.Paused) || s.State == string(control.Cancelled) {
		eta = "none (" + s.State + ")"
	}
	if s.ETASeconds != nil {
		eta = (time.Duration(*s.ETASeconds * float64(time.Second))).Round(time.Second).String()
	}
	fmt.Fprintf(stdout, "  eta           %s\n", eta)
	return nil
}

// writeOutcomes writes the outcomes providers reported after the send
// (package webhook), each line only when its count is not 0: delivered
// to the device, read, and by reason failed after acceptance, bounced
// and suppressed.
func writeOutcomes(w io.Writer, s control.Status) {
	if s.DeviceDelivered > 0 {
		fmt.Fprintf(w, "  on device     %d (delivered to the device, or the mail server)\n", s.DeviceDelivered)
	}
	if s.Read > 0 {
		fmt.Fprintf(w, "  read          %d\n", s.Read)
	}
	for _, g := range []struct {
		label string
		by    map[string]int64
	}{{"failed", s.Failed}, {"bounced", s.Bounced}, {"suppressed", s.Suppressed}} {
		total := int64(0)
		for _, n := range g.by {
			total += n
		}
		if total == 0 {
			continue
		}
		fmt.Fprintf(w, "  %-13s %d\n", g.label, total)
		for _, r := range slices.Sorted(maps.Keys(g.by)) {
			if g.by[r] > 0 {
				fmt.Fprintf(w, "    %-20s %d\n", r, g.by[r])
			}
		}
	}
}

// unknownCampaign is the usage error (exit status 2) of a campaign Redis
// holds nothing of, most likely a typo: it names the campaign, the channel
// and what to check, then hint.
func unknownCampaign(verb, campaign, channel, hint string) error {
	return &usageError{fmt.Sprintf("campaign %s: campaign %s of %s is not known (nothing published, sent or set for it); check the name%s",
		verb, quoteText(campaign), channel, hint)}
}
