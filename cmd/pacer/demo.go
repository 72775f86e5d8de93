package main

import (
	"bytes"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"math"
	"os"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/pacerhq/pacer/bucket"
	"github.com/pacerhq/pacer/bucket/adapt"
	"github.com/pacerhq/pacer/pacer/consumer"
	"github.com/pacerhq/pacer/pacer/control"
	"github.com/pacerhq/pacer/pacer/ledger"
	"github.com/pacerhq/pacer/pacer/produce"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
)

// demoKey is one row of the demo report.
type demoKey struct {
	Key        string  `json:"key"`
	Messages   int     `json:"messages"`
	Delivered  int     `json:"delivered"`
	Duplicates int     `json:"duplicates"`
	Throttled  int     `json:"throttled"`
	Seconds    float64 `json:"seconds"`
	Max1s      int     `json:"max_1s"`
	Rate       float64 `json:"rate"` // achieved msgs/s: delivered / (last - first arrival), so the burst shows above the rate
	// Paced is the achieved msgs/s after the first burst: (delivered -
	// burst) / (last - first arrival); 0 when not judged (fewer than a
	// second of the rate after the burst).
	Paced float64 `json:"paced_rate"`
}

// minPaced is the least fraction of the configured rate a key of the demo
// must reach after its first burst: below it the demo fails, since pacing
// far under what the provider allows is a fault as much as a throttle.
const minPaced = 0.9

// tooSlow reports whether a key paced at paced msgs/s after its burst fell
// below minPaced of the configured rate.
func tooSlow(paced, rate float64) bool { return paced < minPaced*rate }

// pacedRate returns the rate at which delivered messages of one key arrived
// after the first burst, in msgs/s, over span (last - first arrival): a
// full bucket lets burst go at the first instant, the rest come at the
// rate, so (delivered - burst) / span is the rate kept. judged is false
// when fewer than rate * 1 s messages came after the burst: too few to
// tell the rate from a few ms of jitter.
func pacedRate(delivered, burst int, span time.Duration, rate float64) (paced float64, judged bool) {
	after := delivered - burst
	if float64(after) < rate || span <= 0 {
		return 0, false
	}
	return float64(after) / span.Seconds(), true
}

type demoReport struct {
	Keys []demoKey `json:"keys"`
	Lost int       `json:"lost"`
	// Campaign is the demo campaign's counters as `pacer campaign status`
	// reads them: written by the ledger with its records' marks.
	Campaign control.Status `json:"campaign"`
}

// demoCampaign is the campaign of every demo envelope (see demoChannel.line).
const demoCampaign = "demo"

func cmdDemo(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("pacer demo", flag.ContinueOnError)
	fs.SetOutput(stderr)
	channel := fs.String("channel", "whatsapp", "channel to demonstrate: "+channelList())
	keyKinds := make([]string, len(channelTable))
	for i, ch := range channelTable {
		keyKinds[i] = ch.keys
	}
	numbers := fs.Int("numbers", 3, "pacing keys in the campaign ("+strings.Join(keyKinds, ", ")+")")
	messages := fs.Int("messages", 400, "messages per pacing key")
	rate := fs.Float64("rate", 50, "pacer limit: messages per second per pacing key")
	burst := fs.Int("burst", 10, "pacer limit: bucket capacity in messages")
	partitions := fs.Int("partitions", 3, "partitions of the demo topic")
	report := fs.String("report", "", "also write the report as JSON to this file")
	verbose := fs.Bool("v", false, "show the pacer's logs")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	var bad []string
	for _, f := range []struct {
		name string
		v    int
	}{{"numbers", *numbers}, {"messages", *messages}, {"partitions", *partitions}} {
		if f.v < 1 {
			bad = append(bad, fmt.Sprintf("-%s %d", f.name, f.v))
		}
	}
	if len(bad) > 0 {
		return &usageError{"demo: " + strings.Join(bad, ", ") + ": must be >= 1"}
	}
	ch, err := channelNamed(*channel)
	if err != nil {
		return err
	}
	lim := bucket.Limit{PerSecond: *rate, Burst: *burst}
	topic := "pacer." + ch.name
	// The pacer's own rules (the bucket's and the AIMD's range of rates)
	// are checked with the other flags, before anything is published.
	pc := consumer.Config{Channel: ch.name, Topic: topic, RecipientLimit: ch.defaultRecipientLimit(), Limit: lim, Drain: 5 * time.Second}
	var flagErrs []string
	for _, e := range pacerErrors(pc.Validate()) {
		switch {
		case e.Field == "Limit.PerSecond":
			flagErrs = append(flagErrs, "-rate: "+e.Err.Error())
		case e.Field == "Limit.Burst":
			flagErrs = append(flagErrs, "-burst: "+e.Err.Error())
		default:
			flagErrs = append(flagErrs, e.Error())
		}
	}
	if len(flagErrs) > 0 {
		return &usageError{"demo: " + strings.Join(flagErrs, "; ")}
	}
	// The report file is opened before the demo runs: a path that cannot
	// be written fails now, not after the whole demo.
	var reportFile *os.File
	if *report != "" {
		if reportFile, err = os.OpenFile(*report, os.O_WRONLY|os.O_CREATE, 0o644); err != nil {
			return &usageError{"demo: -report: " + err.Error()}
		}
		defer reportFile.Close()
	}

	kc, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(int32(*partitions), topic))
	if err != nil {
		return fmt.Errorf("embedded kafka: %w", err)
	}
	defer kc.Close()
	mr, err := miniredis.Run()
	if err != nil {
		return fmt.Errorf("embedded redis: %w", err)
	}
	defer mr.Close()
	// The fake provider enforces the same rate, with 100 ms of extra burst
	// for network jitter between the Redis clock and its own.
	prov, err := ch.demo(ctx, *numbers, *rate, *burst+int(math.Ceil(*rate/10)))
	if prov != nil {
		defer prov.close()
	}
	if err != nil {
		return err
	}
	fmt.Fprintf(stdout, "embedded Kafka %v, embedded Redis %s, fake %s %s\n", kc.ListenAddrs(), mr.Addr(), *channel, prov.url)

	// The campaign: numbers x messages envelopes, interleaved.
	var campaign bytes.Buffer
	keys := prov.keys
	for i := range *messages {
		for n := range keys {
			campaign.WriteString(prov.line(n, i, *messages) + "\n")
		}
	}
	prod, err := kgo.NewClient(kgo.SeedBrokers(kc.ListenAddrs()...), kgo.RecordPartitioner(kgo.ManualPartitioner()))
	if err != nil {
		return err
	}
	ps, err := produce.Publish(ctx, prod, &campaign, produce.PublishConfig{Topic: topic, Partitions: *partitions})
	prod.Close()
	if err != nil {
		return err
	}
	rdb := redis.NewClient(&redis.Options{Addr: mr.Addr()})
	defer rdb.Close()
	limiter := bucket.New(rdb, bucket.Config{})
	// The ledger and campaign counters of pacer run: claims started ahead
	// of their slots, marks written behind, the campaign counted with them.
	ctl := control.New(rdb, limiter.Keys())
	published := map[string]int64{}
	for c, n := range ps.ByCampaign {
		published[c] = int64(n)
	}
	if err := ctl.AddPublished(ctx, ch.name, published); err != nil {
		return fmt.Errorf("demo: campaign counters: %w", err)
	}
	total := *numbers * *messages
	fmt.Fprintf(stdout, "published %d messages (%d keys x %d) in %.2fs; pacing at %.4g msgs/s, burst %d per key\n",
		ps.Published, *numbers, *messages, ps.Elapsed.Seconds(), *rate, *burst)

	level := slog.LevelWarn
	if *verbose {
		level = slog.LevelInfo
	}
	pc.Logger = slog.New(slog.NewTextHandler(stderr, &slog.HandlerOptions{Level: level}))
	led := ledger.NewBatcher(rdb, limiter.Keys(), ledger.BatchConfig{Count: consumer.CampaignCounts(ctl, ch.name)})
	p, err := consumer.New(pc, []kgo.Opt{kgo.SeedBrokers(kc.ListenAddrs()...)},
		consumer.Deps{Bucket: limiter, Adapter: adapt.New(rdb, bucket.Config{}), Ledger: led, Sender: prov.sender, Campaigns: ctl},
		prometheus.NewRegistry())
	if err != nil {
		return err
	}
	runCtx, stop := context.WithCancel(ctx)
	defer stop()
	runErr := make(chan error, 1)
	go func() { runErr <- p.Run(runCtx) }()

	// Wait until every message arrived, or a generous deadline passed.
	deadline := time.Now().Add(time.Duration(float64(*messages)/(*rate)*float64(time.Second))*2 + 30*time.Second)
	tick := time.NewTicker(250 * time.Millisecond)
	defer tick.Stop()
	lastShown := time.Now()
	for done := false; !done; {
		select {
		case <-ctx.Done():
			done = true
		case <-tick.C:
			got := 0
			for _, s := range prov.stats() {
				got += s.Delivered
			}
			if got >= total || time.Now().After(deadline) {
				done = true
			} else if time.Since(lastShown) >= 2*time.Second {
				fmt.Fprintf(stdout, "  delivered %d/%d\n", got, total)
				lastShown = time.Now()
			}
		}
	}
	// Let a late duplicate show up before the pacer stops.
	time.Sleep(500 * time.Millisecond)
	stop()
	if err := <-runErr; err != nil {
		return err
	}
	cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
	err = led.Close(cctx)
	cancel()
	if err != nil {
		return fmt.Errorf("demo: idempotency ledger: %w", err)
	}
	camp, err := ctl.CampaignStatus(context.WithoutCancel(ctx), ch.name, demoCampaign)
	if err != nil {
		return fmt.Errorf("demo: campaign counters: %w", err)
	}

	stats := prov.stats()
	rep := demoReport{}
	ok := true
	var slow []string // keys paced below minPaced of the rate
	tw := tabwriter.NewWriter(stdout, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "key\tmessages\tdelivered\tduplicates\tthrottled\tseconds\tmsgs/s\tpaced msgs/s\tmax in 1s\t")
	for _, k := range keys {
		s := stats[k]
		row := demoKey{Key: k, Messages: *messages, Delivered: s.Delivered - s.Duplicates, Duplicates: s.Duplicates,
			Throttled: s.Throttled, Max1s: s.Max1s}
		paced := "-"
		if !s.First.IsZero() {
			row.Seconds = s.Last.Sub(s.First).Seconds()
			if row.Seconds > 0 {
				row.Rate = float64(s.Delivered) / row.Seconds
			}
			if r, judged := pacedRate(row.Delivered, *burst, s.Last.Sub(s.First), *rate); judged {
				row.Paced, paced = r, fmt.Sprintf("%.1f", r)
				if tooSlow(r, *rate) {
					ok = false
					slow = append(slow, fmt.Sprintf("%s %.1f", k, r))
				}
			}
		}
		rep.Lost += row.Messages - row.Delivered
		if row.Delivered != row.Messages || row.Duplicates > 0 || row.Throttled > 0 {
			ok = false
		}
		rep.Keys = append(rep.Keys, row)
		fmt.Fprintf(tw, "%s\t%d\t%d\t%d\t%d\t%.2f\t%.1f\t%s\t%d\t\n", row.Key, row.Messages, row.Delivered, row.Duplicates,
			row.Throttled, row.Seconds, row.Rate, paced, row.Max1s)
	}
	tw.Flush()
	rep.Campaign = camp
	var dead int64
	for _, n := range camp.DeadLetters {
		dead += n
	}
	fmt.Fprintf(stdout, "campaign %s: published %d, delivered %d, dead-lettered %d, duplicates %d, remaining %d (counted with the ledger's marks)\n",
		camp.Campaign, camp.Published, camp.Delivered, dead, camp.Duplicates, camp.Remaining)
	delivered := total - rep.Lost
	countsOK := camp.Delivered == int64(delivered) && camp.Remaining == 0
	fmt.Fprintf(stdout, "lost %d; limit per key: %.4g msgs/s + burst %d: the pacer's slots hold at most %d in any 1 s;\n"+
		"max in 1s counts arrivals at the fake, which add a few ms of jitter; msgs/s = delivered / (last - first arrival);\n"+
		"paced msgs/s = (delivered - burst) / (last - first arrival), judged when at least a second of the rate follows the burst\n",
		rep.Lost, *rate, *burst, int(math.Floor(*rate))+*burst)
	if reportFile != nil {
		b, _ := json.MarshalIndent(rep, "", "  ")
		if err := reportFile.Truncate(0); err != nil {
			return fmt.Errorf("demo: -report: %w", err)
		}
		if _, err := reportFile.Write(append(b, '\n')); err != nil {
			return fmt.Errorf("demo: -report: %w", err)
		}
		if err := reportFile.Close(); err != nil {
			return fmt.Errorf("demo: -report: %w", err)
		}
	}
	if !countsOK {
		return fmt.Errorf("demo failed: campaign %s counted %d delivered and %d remaining; the provider received %d of %d",
			demoCampaign, camp.Delivered, camp.Remaining, delivered, total)
	}
	if !ok {
		if len(slow) > 0 {
			return fmt.Errorf("demo failed: every message must arrive exactly once with no throttle, each key paced at >= %.0f%% of %.4g msgs/s after its burst; paced below: %s",
				minPaced*100, *rate, strings.Join(slow, ", "))
		}
		return fmt.Errorf("demo failed: every message must arrive exactly once with no throttle")
	}
	fmt.Fprintf(stdout, "ok: every message delivered exactly once, no throttle, every judged key paced at >= %.0f%% of the rate after its burst\n", minPaced*100)
	return nil
}
