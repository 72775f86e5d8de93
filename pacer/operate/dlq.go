package operate

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"maps"
	"slices"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/pacerhq/pacer/pacer/envelope"
	"github.com/pacerhq/pacer/pacer/produce"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
)

// DLQFilter chooses DLQ records: each field set must match. Reason
// matches a record's pacer-reason exactly or as its prefix before ':'
// ("permanent" matches "permanent:131026").
type DLQFilter struct {
	Reason   string `json:"reason,omitempty"`   // one of envelope.DLQReasons, permanent:<code> or suppressed:<reason>
	Campaign string `json:"campaign,omitempty"` // the envelope's campaign
	Key      string `json:"key,omitempty"`      // the pacing key
}

// Check returns a [*FieldError] naming reason when it is not a DLQ reason
// (envelope.CheckReason).
func (f DLQFilter) Check() error {
	if f.Reason == "" {
		return nil
	}
	if envelope.CheckReason(f.Reason) != nil {
		return &FieldError{"reason", fmt.Sprintf("%q is not a DLQ reason: %s, permanent:<provider code> or suppressed:<reason>",
			f.Reason, strings.Join(envelope.DLQReasons, ", "))}
	}
	return nil
}

// DLQRecord is one dead-lettered record as an operator reads it.
type DLQRecord struct {
	Partition int32  `json:"partition"`
	Offset    int64  `json:"offset"`
	Key       string `json:"key"`      // the record key: the pacing key
	ID        string `json:"id"`       // the envelope id; "" when the value is not an envelope
	Campaign  string `json:"campaign"` // "" when none
	Reason    string `json:"reason"`   // pacer-reason
	Detail    string `json:"detail"`   // pacer-detail: the last provider answer or the parse error
	// Attempts is pacer-attempt: the failed requests before it was
	// dead-lettered (0 when none failed: a permanent refusal at the
	// first, or never sent).
	Attempts int `json:"attempts"`
	// DeadLettered is when it was written to the DLQ (the record's
	// timestamp).
	DeadLettered time.Time `json:"dead_lettered"`
	// Envelope is the record's value when it is JSON ([ShowDLQ] only).
	Envelope json.RawMessage `json:"envelope,omitempty"`
	// Value is the record's value when it is not JSON, as text
	// ([ShowDLQ] only).
	Value string `json:"value,omitempty"`
	// Error is why the value is not an envelope; "" when it is.
	Error string `json:"error,omitempty"`
}

// DLQList is a page of DLQ records that [ListDLQ] read.
type DLQList struct {
	Records []DLQRecord `json:"records"` // the first matches, by partition and offset
	Matched int         `json:"matched"` // records matching the filter, Records' and the rest
	Scanned int         `json:"scanned"` // DLQ records read
}

// dlqTopic checks that topic's DLQ exists and returns its name.
func dlqTopic(ctx context.Context, cl *kgo.Client, topic string) (string, error) {
	dlq := topic + ".dlq"
	n, err := produce.TopicPartitions(ctx, cl, dlq)
	if err != nil {
		return "", err
	}
	if n == 0 {
		return "", fmt.Errorf("%w: %s: nothing was dead-lettered from %s yet", ErrNoDLQ, dlq, topic)
	}
	return dlq, nil
}

// ListDLQ reads topic's DLQ (<topic>.dlq) from its start to its current
// end and returns the records matching f, at most max (the rest only
// counted), without their values, sorted by partition and offset. A message dead-lettered twice is listed
// once, as [ReplayDLQ] would replay it. It returns [ErrNoDLQ] when the
// DLQ does not exist, a [*FieldError] for a bad filter; other errors are
// Kafka's. It writes nothing; cl must not be a group consumer, nor be
// used by anything else meanwhile.
func ListDLQ(ctx context.Context, cl *kgo.Client, topic string, f DLQFilter, max int) (DLQList, error) {
	out := DLQList{Records: []DLQRecord{}}
	if err := f.Check(); err != nil {
		return out, err
	}
	dlq, err := dlqTopic(ctx, cl, topic)
	if err != nil {
		return out, err
	}
	s, err := produce.Replay(ctx, cl, produce.ReplayConfig{DLQTopic: dlq, Topic: topic, Partitions: 1, DryRun: true,
		Reason: f.Reason, Campaign: f.Campaign, Key: f.Key, Chosen: func(r produce.ReplayedRecord) {
			if len(out.Records) < max {
				out.Records = append(out.Records, dlqRecord(r, false))
			}
		}})
	out.Matched, out.Scanned = s.Replayed, s.Scanned
	slices.SortFunc(out.Records, func(a, b DLQRecord) int {
		if a.Partition != b.Partition {
			return int(a.Partition - b.Partition)
		}
		return int(a.Offset - b.Offset)
	})
	return out, err
}

// ShowDLQ returns the record at partition and offset of topic's DLQ,
// with its value: [ErrNotFound] when there is none, [ErrNoDLQ] when the
// DLQ does not exist; other errors are Kafka's. It reads that partition
// only, from the offset asked.
func ShowDLQ(ctx context.Context, cl *kgo.Client, topic string, at produce.Position) (DLQRecord, error) {
	dlq, err := dlqTopic(ctx, cl, topic)
	if err != nil {
		return DLQRecord{}, err
	}
	var got *DLQRecord
	_, err = produce.Replay(ctx, cl, produce.ReplayConfig{DLQTopic: dlq, Topic: topic, Partitions: 1, DryRun: true,
		Only: []produce.Position{at}, Chosen: func(r produce.ReplayedRecord) {
			rec := dlqRecord(r, true)
			got = &rec
		}})
	if err != nil {
		return DLQRecord{}, err
	}
	if got == nil {
		return DLQRecord{}, fmt.Errorf("%w: %s partition %d offset %d", ErrNotFound, dlq, at.Partition, at.Offset)
	}
	return *got, nil
}

func dlqRecord(r produce.ReplayedRecord, value bool) DLQRecord {
	rec := r.Record
	out := DLQRecord{Partition: rec.Partition, Offset: rec.Offset, Key: r.Key, ID: r.ID, Campaign: r.Campaign, Reason: r.Reason,
		Detail: envelope.Header(rec, envelope.HeaderDetail), DeadLettered: rec.Timestamp.UTC()}
	if out.Key == "" {
		out.Key = r.EnvelopeKey
	}
	out.Attempts, _ = strconv.Atoi(envelope.Header(rec, envelope.HeaderAttempt))
	if r.Err != nil {
		out.Error = r.Err.Error()
	}
	if value {
		switch {
		case json.Valid(rec.Value):
			out.Envelope = json.RawMessage(slices.Clone(rec.Value))
		case utf8.Valid(rec.Value):
			out.Value = string(rec.Value)
		default:
			out.Value = fmt.Sprintf("(%d bytes, not UTF-8)", len(rec.Value))
		}
	}
	return out
}

// Replay is what [ReplayDLQ] puts back.
type Replay struct {
	Topic  string             // the main topic; its DLQ is Topic + ".dlq"
	Filter DLQFilter          // which records
	Only   []produce.Position // if not empty, only the records at these positions of the DLQ
	DryRun bool               // count (and call Chosen), write nothing
	// Chosen, if set, is called with each record written back (or that
	// would be), as produce.ReplayConfig.Chosen.
	Chosen func(produce.ReplayedRecord)
}

// checkPositions returns [ErrNotFound] naming the first of only that is
// not a record of dlq: a partition it does not have, or an offset outside
// the partition's records (before its start or at or past its end).
func checkPositions(ctx context.Context, cl *kgo.Client, dlq string, only []produce.Position) error {
	if len(only) == 0 {
		return nil
	}
	adm := kadm.NewClient(cl)
	ends, err := adm.ListEndOffsets(ctx, dlq)
	if err != nil {
		return fmt.Errorf("end offsets of %s: %w", dlq, err)
	}
	starts, err := adm.ListStartOffsets(ctx, dlq)
	if err != nil {
		return fmt.Errorf("start offsets of %s: %w", dlq, err)
	}
	for _, p := range only {
		end, ok := ends.Lookup(dlq, p.Partition)
		if !ok || end.Err != nil {
			return fmt.Errorf("%w: %s has no partition %d (partitions 0..%d)", ErrNotFound, dlq, p.Partition, len(ends[dlq])-1)
		}
		start := int64(0)
		if so, ok := starts.Lookup(dlq, p.Partition); ok && so.Err == nil {
			start = so.Offset
		}
		if p.Offset < start || p.Offset >= end.Offset {
			return fmt.Errorf("%w: %s partition %d has no offset %d (it holds offsets %d..%d)", ErrNotFound, dlq, p.Partition, p.Offset, start, end.Offset-1)
		}
	}
	return nil
}

// ReplayDLQ writes the chosen records of rp.Topic's DLQ back to
// rp.Topic (created with 12 partitions if missing), as [produce.Replay]
// does, and logs "dlq replayed" with the topic, the choice, the records
// put back by reason, and by (not for a dry run). It returns [ErrNoDLQ]
// when the DLQ does not exist, [ErrNotFound] when a position of rp.Only
// is not a record of the DLQ (nothing is replayed then), a [*FieldError] for a bad filter or
// position; other errors are Kafka's, with the summary of what was done
// before them.
func ReplayDLQ(ctx context.Context, cl *kgo.Client, log *slog.Logger, by string, rp Replay) (produce.ReplaySummary, error) {
	if err := rp.Filter.Check(); err != nil {
		return produce.ReplaySummary{}, err
	}
	for _, p := range rp.Only {
		if p.Partition < 0 {
			return produce.ReplaySummary{}, &FieldError{"partition", fmt.Sprintf("%d must be >= 0", p.Partition)}
		}
		if p.Offset < 0 {
			return produce.ReplaySummary{}, &FieldError{"offset", fmt.Sprintf("%d must be >= 0", p.Offset)}
		}
	}
	dlq, err := dlqTopic(ctx, cl, rp.Topic)
	if err != nil {
		return produce.ReplaySummary{}, err
	}
	if err := checkPositions(ctx, cl, dlq, rp.Only); err != nil {
		return produce.ReplaySummary{}, err
	}
	n, err := produce.EnsureTopic(ctx, cl, rp.Topic, 12)
	if err != nil {
		return produce.ReplaySummary{}, err
	}
	s, err := produce.Replay(ctx, cl, produce.ReplayConfig{DLQTopic: dlq, Topic: rp.Topic, Partitions: n,
		Reason: rp.Filter.Reason, Campaign: rp.Filter.Campaign, Key: rp.Filter.Key, Only: rp.Only, DryRun: rp.DryRun, Chosen: rp.Chosen})
	if !rp.DryRun {
		attrs := []any{"topic", rp.Topic, "replayed", s.Replayed, "scanned", s.Scanned}
		if f := rp.Filter; f.Reason != "" || f.Campaign != "" || f.Key != "" {
			attrs = append(attrs, "reason", f.Reason, "campaign", f.Campaign, "key", f.Key)
		}
		if len(rp.Only) > 0 {
			attrs = append(attrs, "records", len(rp.Only))
		}
		for _, r := range slices.Sorted(maps.Keys(s.ByReason)) {
			attrs = append(attrs, "reason_"+r, s.ByReason[r])
		}
		withBy(log, by).Info("dlq replayed", attrs...)
	}
	return s, err
}
