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

// parkCopy returns the copy of r that parks it, due at the estimated start
// of its slot, or sooner: it goes to the tier with the longest delay not
// above the wait (tier 1 when the wait is shorter than every delay) and is
// due after that tier's delay. So the records of a tier stay in the order
// they fall due, and a copy comes back no later than its slot; a copy whose
// key still holds its bound then is parked again (one Kafka write and read
// per hop: with the default 5s,30s,5m tiers, a record 20 minutes behind its
// key's backlog is written about 4 times). The attempt and requeue counts
// are unchanged; pacer-parks counts the hops.
func (p *Pacer) parkCopy(r *kgo.Record, due time.Time) (*kgo.Record, meta) {
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
	return &kgo.Record{Topic: p.cfg.retryTopic(tier), Key: r.Key, Value: r.Value,
		Headers: m.headers(r, kgo.RecordHeader{Key: hParks, Value: []byte(strconv.Itoa(parks))})}, m
}

// park writes r's park copy (see parkCopy) and returns true once Kafka
// acknowledged it (or its DLQ copy, if too large for the retry topic),
// false if ctx ended first.
func (p *Pacer) park(ctx context.Context, r *kgo.Record, due time.Time) bool {
	log := p.log.With("topic", r.Topic, "partition", r.Partition, "offset", r.Offset)
	c, m := p.parkCopy(r, due)
	if err := p.produce(ctx, c, log); err != nil {
		if errors.Is(err, errTooLarge) {
			return p.deadLetter(ctx, r, m, "too-large", "the parked copy exceeds the broker's message size", log)
		}
		return false
	}
	p.qm.parked.Inc()
	return true
}

// parkAsync is park without waiting: the copy joins the client's produce
// batches (a backlog of 100,000 records is parked in seconds, not one
// round trip each), and done(ok) is called once it is acknowledged; a copy
// that failed is written again by park, in a goroutine. It may block while
// the client's produce buffer is full, so callers hold no lock.
//
// The copy carries the key's rate its due time was estimated at
// (hParkRate), so a raise of the key's rate takes it early (waitParked).
func (p *Pacer) parkAsync(ctx context.Context, r *kgo.Record, due time.Time, done func(ok bool)) {
	c, _ := p.parkCopy(r, due)
	c.Headers = append(c.Headers, parkRateHeader(p.keyRate(string(r.Key))))
	p.cl.Produce(ctx, c, func(_ *kgo.Record, err error) {
		if err == nil {
			p.qm.parked.Inc()
			done(true)
			return
		}
		go func() { done(p.park(ctx, r, due)) }()
	})
}
