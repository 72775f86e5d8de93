package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"time"

	"github.com/pacerhq/pacer/bucket"
	"github.com/pacerhq/pacer/pacer/control"
	"github.com/pacerhq/pacer/pacer/produce"
	"github.com/redis/go-redis/v9"
	"github.com/schollz/progressbar/v3"
	"github.com/twmb/franz-go/pkg/kgo"
	"golang.org/x/term"
)

func cmdPublish(ctx context.Context, args []string, stdin io.Reader, stdout, stderr io.Writer, lookup func(string) (string, bool)) error {
	fs, channel := commandFlags("pacer publish", "channel of the campaign", stderr)
	fs.Usage = func() {
		fmt.Fprintln(stderr, "usage: pacer publish --channel C [--topic T] [--partitions N] FILE.jsonl|-")
		fs.PrintDefaults()
	}
	topic := fs.String("topic", "", "topic to publish to (default pacer.<channel>)")
	partitions := fs.Int("partitions", 12, "partitions of the topic if publish has to create it")
	ch, err := parseChannelFlags(fs, args, channel)
	if err != nil {
		return err
	}
	if fs.NArg() != 1 {
		return &usageError{"publish: exactly one FILE (or - for stdin) is required"}
	}
	if *topic == "" {
		*topic = "pacer." + *channel
	}
	if err := checkTopic("topic", *topic); err != nil {
		return err
	}
	if *partitions < 1 {
		return &usageError{"publish: --partitions must be >= 1"}
	}
	cfg, err := loadConfig(lookup, ch)
	if err != nil {
		return fmt.Errorf("%w: %w", errConfig, err)
	}

	var (
		in   io.Reader = stdin
		size int64     = -1
	)
	if name := fs.Arg(0); name != "-" {
		f, err := os.Open(name)
		if err != nil {
			// Like a directory: the argument cannot be used (exit 2).
			return &usageError{fmt.Sprintf("publish: cannot open %s: %v", name, errors.Unwrap(err))}
		}
		defer f.Close()
		if st, err := f.Stat(); err == nil {
			if st.IsDir() {
				return &usageError{fmt.Sprintf("publish: %s is a directory, not a JSONL file", name)}
			}
			size = st.Size()
		}
		in = f
	}

	if err := checkCountsRedis(ctx, cfg, stderr); err != nil {
		return err
	}
	kopts, err := kafkaOpts(cfg)
	if err != nil {
		return err
	}
	cl, err := kgo.NewClient(append(kopts,
		kgo.ClientID("pacer-publish"),
		kgo.RequiredAcks(kgo.AllISRAcks()), // with idempotent writes, kgo's default
		kgo.RecordPartitioner(kgo.ManualPartitioner()),
		kgo.ProducerBatchMaxBytes(4<<20),
	)...)
	if err != nil {
		return fmt.Errorf("kafka client: %w", err)
	}
	defer cl.Close()
	n, err := produce.EnsureTopic(ctx, cl, *topic, *partitions)
	if err != nil {
		return kafkaCommandFailure(cfg, err)
	}

	pc := produce.PublishConfig{
		Topic: *topic, Partitions: n,
		Reject: func(line int, err error) { fmt.Fprintf(stderr, "line %d: %v\n", line, err) },
	}
	if f, ok := stderr.(*os.File); ok && term.IsTerminal(int(f.Fd())) {
		bar := progressbar.NewOptions64(size,
			progressbar.OptionSetWriter(stderr), progressbar.OptionShowBytes(true),
			progressbar.OptionSetDescription("publishing "+*topic), progressbar.OptionThrottle(100_000_000),
			progressbar.OptionClearOnFinish())
		pc.Progress = func(read int64) { bar.Set64(read) }
		defer bar.Finish()
	}
	s, err := produce.Publish(ctx, cl, in, pc)
	fmt.Fprintf(stdout, "published %d, rejected %d, %.2fs, %.0f msgs/s (topic %s, %d partitions)\n",
		s.Published, s.Rejected, s.Elapsed.Seconds(), s.Rate(), *topic, n)
	countPublished(ctx, cfg, *channel, s.ByCampaign, stderr)
	if err != nil {
		return err
	}
	if s.Rejected > 0 {
		return fmt.Errorf("%d line(s) rejected", s.Rejected)
	}
	return nil
}

// checkCountsRedis asks Redis, where countPublished will record the
// campaigns' published counts, for a PING before anything is published
// (at most 2 s). A refusal no retry can mend (credentials, certificates, a
// database out of range) is an error naming the settings, and nothing is
// published; a Redis that is down or slow only warns: the records are
// published all the same and their counts stay unknown (`campaign status`
// shows `published unknown`).
func checkCountsRedis(ctx context.Context, cfg config, stderr io.Writer) error {
	rdb, ping, err := pingRedis(ctx, cfg, 2*time.Second)
	if err != nil {
		return err
	}
	rdb.Close()
	if r := redisRefusal(ping); r != "" {
		return fmt.Errorf("redis: %s: %w; nothing published (the campaigns' counts are kept in Redis)", r, ping)
	}
	if ping != nil && ctx.Err() == nil {
		fmt.Fprintf(stderr, "pacer: Redis not reachable (%s): %v; publishing anyway, the campaigns' published counts will be unknown\n", redisSetting(cfg), ping)
	}
	return nil
}

// countPublished adds the records published per campaign to the campaigns'
// counters in Redis (one pipelined round trip), for `pacer campaign
// status`. Best effort: without Redis the count stays unknown and publish
// still succeeds. The records published before an interrupt (Ctrl-C ends
// ctx) are in Kafka: they are counted all the same, within 5 s.
func countPublished(ctx context.Context, cfg config, channel string, byCampaign map[string]int, stderr io.Writer) {
	if len(byCampaign) == 0 {
		return
	}
	rdb, err := newRedis(cfg)
	if err != nil {
		fmt.Fprintf(stderr, "pacer: campaign counts not recorded: %v\n", err)
		return
	}
	defer rdb.Close()
	redis.SetLogger(quietRedis{})
	st := control.New(rdb, bucket.NewKeys(cfg.RedisPrefix))
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
	defer cancel()
	counts := make(map[string]int64, len(byCampaign))
	for c, n := range byCampaign {
		counts[c] = int64(n)
	}
	if err := st.AddPublished(ctx, channel, counts); err != nil {
		fmt.Fprintf(stderr, "pacer: published counts of %d campaign(s) not recorded in Redis (%s): %v\n", len(counts), redisSetting(cfg), err)
	}
}
