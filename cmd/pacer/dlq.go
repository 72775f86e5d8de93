package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"sort"
	"strings"

	"github.com/pacerhq/pacer/pacer/envelope"
	"github.com/pacerhq/pacer/pacer/operate"
	"github.com/pacerhq/pacer/pacer/produce"
	"github.com/twmb/franz-go/pkg/kgo"
)

func cmdDLQ(ctx context.Context, args []string, stdout, stderr io.Writer, lookup func(string) (string, bool)) error {
	const usage = "usage: pacer dlq replay --channel C [--topic T] [--reason R] [--campaign X] [--key K] [--dry-run]"
	_, fs, channel, err := verbCommand(args, stdout, stderr, "dlq", usage, [][2]string{
		{"replay", "put dead-lettered records of <topic>.dlq back on the main topic"},
	})
	if err != nil {
		return err
	}
	topic := fs.String("topic", "", "main topic (default pacer.<channel>); the DLQ is <topic>.dlq")
	reason := fs.String("reason", "", "replay only this pacer-reason: "+strings.Join(envelope.DLQReasons, ", ")+", permanent:<provider code> or suppressed:<reason>; default all")
	campaign := fs.String("campaign", "", "replay only envelopes of this campaign; default all")
	key := fs.String("key", "", "replay only records of this pacing key; default all")
	dry := fs.Bool("dry-run", false, "list and count what would be replayed, write nothing")
	ch, err := parseChannelFlags(fs, args[1:], channel)
	if err != nil {
		return err
	}
	filter := operate.DLQFilter{Reason: *reason, Campaign: *campaign, Key: *key}
	if *reason != "" {
		if err := envelope.CheckReason(*reason); err != nil {
			return &usageError{"dlq replay: --reason: " + err.Error()}
		}
	}
	if *topic == "" {
		*topic = "pacer." + *channel
	}
	if err := checkTopic("topic", *topic); err != nil {
		return err
	}
	cfg, err := loadConfig(lookup, ch)
	if err != nil {
		return fmt.Errorf("%w: %w", errConfig, err)
	}
	kopts, err := kafkaOpts(cfg)
	if err != nil {
		return err
	}
	cl, err := kgo.NewClient(append(kopts, kgo.ClientID("pacer-dlq-replay"),
		kgo.RecordPartitioner(kgo.ManualPartitioner()))...)
	if err != nil {
		return fmt.Errorf("kafka client: %w", err)
	}
	defer cl.Close()
	rp := operate.Replay{Topic: *topic, Filter: filter, DryRun: *dry}
	if *dry {
		// One line per record a replay would write, so that the ids can be
		// checked with the provider first.
		rp.Chosen = func(r produce.ReplayedRecord) {
			id := quoteText(r.ID)
			if r.Err != nil {
				id = "- (value is not an envelope)"
			}
			campaign := quoteText(r.Campaign)
			if r.Campaign == "" {
				campaign = "-"
			}
			// The record key the replay writes, unchanged from the DLQ.
			key := quoteText(r.Key)
			if r.Key == "" {
				key = "-"
			}
			fmt.Fprintf(stdout, "would write key %s id %s campaign %s reason %s", key, id, campaign, quoteText(r.Reason))
			switch {
			case r.EnvelopeKey == "":
			case r.Key == "":
				fmt.Fprintf(stdout, " (paced by the envelope key %s)", quoteText(r.EnvelopeKey))
			case r.Key != r.EnvelopeKey:
				// The pacer refuses a record key that differs from the
				// envelope's: say so before the replay dead-letters it again.
				fmt.Fprintf(stdout, " (envelope key %s differs: dead-lettered again as malformed)", quoteText(r.EnvelopeKey))
			}
			fmt.Fprintln(stdout)
		}
	}
	// A DLQ that does not exist holds nothing to replay: say so, and
	// create no topic on the way.
	s, err := operate.ReplayDLQ(ctx, cl, newLogger(cfg, stderr), "", rp)
	if errors.Is(err, operate.ErrNoDLQ) {
		return fmt.Errorf("dlq replay: DLQ topic %s.dlq does not exist: nothing was dead-lettered from %s yet, or --channel/--topic name another topic", *topic, *topic)
	}
	if err != nil && s.Scanned == 0 {
		return kafkaCommandFailure(cfg, err) // nothing done: the error alone, no "replayed 0" line above it
	}
	verb := "replayed"
	if *dry {
		verb = "would replay"
	}
	fmt.Fprintf(stdout, "%s %d of %d DLQ records to %s\n", verb, s.Replayed, s.Scanned, *topic)
	if s.Duplicates > 0 {
		fmt.Fprintf(stdout, "  %d more chosen were copies of an envelope id replayed once\n", s.Duplicates)
	}
	reasons := make([]string, 0, len(s.ByReason))
	for r := range s.ByReason {
		reasons = append(reasons, r)
	}
	sort.Strings(reasons)
	for _, r := range reasons {
		fmt.Fprintf(stdout, "  %-28s %d\n", r, s.ByReason[r])
	}
	if err == nil && s.Replayed == 0 && s.Scanned > 0 && (*reason != "" || *campaign != "" || *key != "") {
		fmt.Fprintln(stderr, "pacer: no DLQ record matched --reason/--campaign/--key")
	}
	return err
}
