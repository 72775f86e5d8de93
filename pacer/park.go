package pacer

import (
	"context"
	"errors"
	"strconv"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
)

// hParks counts the times a record was parked: written to a retry topic
// because its key held its lookahead bound, never an attempt.
const hParks = "pacer-parks"

// park writes a copy of r to a retry topic, due at the estimated start of
// its slot, or sooner: to the tier with the longest delay not above the
// wait (tier 1 when the wait is shorter than every delay), due after that
// tier's delay. So the records of a tier stay in the order they fall due,
// and a copy comes back no later than its slot; a copy whose key still
// holds its bound then is parked again (one Kafka write and read per hop:
// with the default 5s,30s,5m tiers, a record 20 minutes behind its key's
// backlog is written about 4 times). The attempt and requeue counts are
// unchanged. It returns true once Kafka acknowledged the copy (or its DLQ
// copy, if too large for the retry topic), false if ctx ended first.
func (p *Pacer) park(ctx context.Context, r *kgo.Record, due time.Time) bool {
	log := p.log.With("topic", r.Topic, "partition", r.Partition, "offset", r.Offset)
	m := readMeta(r)
	wait := time.Until(due)
	tier := 1
	for i, d := range p.cfg.RetryDelays {
		if d <= wait {
			tier = i + 1
		}
	}
	m.due = time.Now().Add(min(wait, p.cfg.RetryDelays[tier-1]))
	parks := 1
	for _, h := range r.Headers {
		if h.Key == hParks {
			n, _ := strconv.Atoi(string(h.Value))
			parks = n + 1
		}
	}
	c := &kgo.Record{Topic: p.cfg.retryTopic(tier), Key: r.Key, Value: r.Value,
		Headers: m.headers(r, kgo.RecordHeader{Key: hParks, Value: []byte(strconv.Itoa(parks))})}
	if err := p.produce(ctx, c, log); err != nil {
		if errors.Is(err, errTooLarge) {
			return p.deadLetter(ctx, r, m, "too-large", "the parked copy exceeds the broker's message size", log)
		}
		return false
	}
	p.qm.parked.Inc()
	log.Debug("parked", "due_in", time.Until(m.due), "slot_in", wait, "tier", tier)
	return true
}
