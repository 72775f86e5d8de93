package produce

import (
	"context"
	"fmt"
	"strings"
	"sync"

	"github.com/pacerhq/pacer/pacer/envelope"
	"github.com/pacerhq/pacer/partitioner"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
)

// ReplayConfig chooses which DLQ records [Replay] puts back.
type ReplayConfig struct {
	DLQTopic   string // required
	Topic      string // main topic to write to; required
	Partitions int    // partitions of Topic, > 0
	Reason     string // replay only records whose pacer-reason is Reason or starts with Reason+":"; "" = all
	Campaign   string // replay only envelopes of this campaign; "" = all
	// Key replays only records of this pacing key: the record key, or
	// the envelope's key for a record without one; "" = all.
	Key string
	// Only, if not empty, replays only the records at these positions of
	// the DLQ (and only their partitions are read, from the lowest
	// position asked); the other choices apply too.
	Only   []Position
	DryRun bool // count, write nothing
	// Chosen, if set, is called with each record written back (or that
	// would be, with DryRun), in the order read (per DLQ partition, by
	// offset), from Replay's goroutine.
	Chosen func(ReplayedRecord)
}

// ReplayedRecord is one record [Replay] writes back (or would): the record
// key it writes (the DLQ record's key, unchanged), envelope id and campaign
// (ID "" and Err set when its value does not parse as an envelope), and its
// pacer-reason. EnvelopeKey is the envelope's pacing key ("" when the
// value does not parse): the pacer paces a record without a key by it, and
// dead-letters a record whose key differs from it again as malformed.
type ReplayedRecord struct {
	Key, ID, Campaign, Reason string
	EnvelopeKey               string
	Err                       error
	// Record is the DLQ record as read (its partition, offset, headers
	// and value); not to be changed.
	Record *kgo.Record
}

// Position is one record's place in a topic.
type Position struct {
	Partition int32 `json:"partition"`
	Offset    int64 `json:"offset"`
}

// ReplaySummary counts what [Replay] did.
type ReplaySummary struct {
	Scanned    int            // DLQ records read
	Replayed   int            // records written back to the main topic (or that would be, with DryRun)
	Duplicates int            // chosen records not written: their envelope id was replayed already in this run
	ByReason   map[string]int // replayed records by pacer-reason
}

// Replay reads the DLQ from its start to its current end and writes each
// chosen record back to the main topic, on its key's partition, with the
// pacer's headers stripped and pacer-replayed: 1 set. A record whose
// envelope id (of its pacing key) was chosen before in the same run is not
// written again (a message dead-lettered twice is replayed once); one whose
// value does not parse is written each time. A replayed record whose id
// the ledger holds as claimed by a dead process, or as dead-lettered, is
// sent (the operator decided); one already delivered is still skipped. The
// DLQ itself is not changed, so running Replay twice puts records back
// twice; the ledger keeps a delivered id from being sent again. cl must not
// be a group consumer.
func Replay(ctx context.Context, cl *kgo.Client, cfg ReplayConfig) (ReplaySummary, error) {
	s := ReplaySummary{ByReason: map[string]int{}}
	if cfg.DLQTopic == "" || cfg.Topic == "" || cfg.Partitions < 1 {
		return s, fmt.Errorf("pacer: replay: DLQTopic, Topic and Partitions > 0 are required")
	}
	adm := kadm.NewClient(cl)
	ends, err := adm.ListEndOffsets(ctx, cfg.DLQTopic)
	if err != nil {
		return s, fmt.Errorf("pacer: replay: end offsets of %s: %w", cfg.DLQTopic, err)
	}
	starts, err := adm.ListStartOffsets(ctx, cfg.DLQTopic)
	if err != nil {
		return s, fmt.Errorf("pacer: replay: start offsets of %s: %w", cfg.DLQTopic, err)
	}
	// With Only, each asked partition is read from its lowest position
	// asked to its highest.
	var only map[Position]bool
	lowest, highest := map[int32]int64{}, map[int32]int64{}
	if len(cfg.Only) > 0 {
		only = map[Position]bool{}
		for _, p := range cfg.Only {
			only[p] = true
			if lo, ok := lowest[p.Partition]; !ok || p.Offset < lo {
				lowest[p.Partition] = p.Offset
			}
			highest[p.Partition] = max(highest[p.Partition], p.Offset)
		}
	}
	want := map[int32]int64{}
	from := map[string]map[int32]kgo.Offset{cfg.DLQTopic: {}}
	ends.Each(func(o kadm.ListedOffset) {
		if o.Err != nil {
			err = o.Err
			return
		}
		start := int64(0)
		if so, ok := starts.Lookup(cfg.DLQTopic, o.Partition); ok && so.Err == nil {
			start = so.Offset
		}
		if only != nil {
			lo, asked := lowest[o.Partition]
			if !asked {
				return
			}
			start = max(start, lo)
			o.Offset = min(o.Offset, highest[o.Partition]+1)
		}
		if o.Offset > start {
			want[o.Partition] = o.Offset
			from[cfg.DLQTopic][o.Partition] = kgo.NewOffset().At(start)
		}
	})
	if err != nil {
		return s, fmt.Errorf("pacer: replay: %s: %w", cfg.DLQTopic, err)
	}
	if len(want) == 0 {
		return s, nil
	}
	cl.AddConsumePartitions(from)
	defer cl.RemoveConsumePartitions(map[string][]int32{cfg.DLQTopic: keys(want)})
	var (
		mu         sync.Mutex
		produceErr error
		chosen     = map[string]bool{} // pacing key "\x00" envelope id
	)
	for len(want) > 0 {
		fs := cl.PollFetches(ctx)
		if ctx.Err() != nil {
			return s, ctx.Err()
		}
		var ferr error
		fs.EachError(func(_ string, _ int32, e error) { ferr = e })
		if ferr != nil {
			return s, fmt.Errorf("pacer: replay: fetch: %w", ferr)
		}
		fs.EachRecord(func(r *kgo.Record) {
			end, ok := want[r.Partition]
			if !ok || r.Offset >= end {
				return
			}
			if r.Offset == end-1 {
				delete(want, r.Partition)
			}
			s.Scanned++
			if only != nil && !only[Position{r.Partition, r.Offset}] {
				return
			}
			reason := envelope.Header(r, envelope.HeaderReason)
			if cfg.Reason != "" && reason != cfg.Reason && !strings.HasPrefix(reason, cfg.Reason+":") {
				return
			}
			env, perr := envelope.Parse(r.Value)
			if cfg.Campaign != "" && (perr != nil || env.Campaign != cfg.Campaign) {
				return
			}
			if cfg.Key != "" {
				key := string(r.Key)
				if key == "" && perr == nil {
					key = env.Key
				}
				if key != cfg.Key {
					return
				}
			}
			if perr == nil {
				id := env.Key + "\x00" + env.ID
				if chosen[id] {
					s.Duplicates++
					return
				}
				chosen[id] = true
			}
			s.Replayed++
			s.ByReason[reason]++
			if cfg.Chosen != nil {
				rr := ReplayedRecord{Key: string(r.Key), Reason: reason, Err: perr, Record: r}
				if perr == nil {
					rr.ID, rr.Campaign, rr.EnvelopeKey = env.ID, env.Campaign, env.Key
				}
				cfg.Chosen(rr)
			}
			if cfg.DryRun {
				return
			}
			out := &kgo.Record{Topic: cfg.Topic, Key: r.Key, Value: r.Value,
				Partition: partitioner.Partition(r.Key, cfg.Partitions)}
			out.Headers = append(envelope.Foreign(r.Headers), kgo.RecordHeader{Key: envelope.HeaderReplayed, Value: []byte("1")})
			cl.Produce(ctx, out, func(_ *kgo.Record, err error) {
				mu.Lock()
				defer mu.Unlock()
				if err != nil && produceErr == nil {
					produceErr = err
				}
			})
		})
	}
	if err := cl.Flush(ctx); err != nil {
		return s, fmt.Errorf("pacer: replay: %w", err)
	}
	mu.Lock()
	defer mu.Unlock()
	if produceErr != nil {
		return s, fmt.Errorf("pacer: replay: produce: %w", produceErr)
	}
	return s, nil
}

func header(r *kgo.Record, key string) string {
	for _, h := range r.Headers {
		if h.Key == key {
			return string(h.Value)
		}
	}
	return ""
}

func keys(m map[int32]int64) []int32 {
	out := make([]int32, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	return out
}
