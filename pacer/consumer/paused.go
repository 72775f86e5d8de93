package consumer

import (
	"context"
	"errors"
	"strconv"
	"time"

	"github.com/pacerhq/pacer/pacer/campaign"
	"github.com/pacerhq/pacer/pacer/control"
	"github.com/pacerhq/pacer/pacer/envelope"
	"github.com/twmb/franz-go/pkg/kgo"
)

// deferPaused is the outcome of a record of a paused campaign: parked for
// the longest retry delay on the last tier (see parkPaused), or, in strict
// order (whose copies are not taken early), campaign.PausedRecheck ahead.
func (p *Pacer) deferPaused() outcome {
	if p.strict() {
		return deferUntil("paused", campaign.PausedRecheck)
	}
	return deferUntil("paused", p.cfg.RetryDelays[len(p.cfg.RetryDelays)-1])
}

// parkPaused writes the copy of f's record, of a paused campaign, to the
// last retry tier, due after its delay and carrying the campaign's name
// (envelope.HeaderPaused), and returns true once Kafka acknowledged it.
// The tier's worker reads it early and holds it; it is taken as soon as
// the campaign runs again (see [Pacer.resumed]), so a resume sends it
// within about a second, while a pause costs one Kafka write per record
// per tier delay (5 minutes by default), not per PausedRecheck. The delay
// is no longer than the tier's: the ledger remembers a delivered id for
// longer (see [MinLedgerTTL]), which a held copy delays the commit of.
func (p *Pacer) parkPaused(ctx context.Context, f *flight, wait time.Duration) bool {
	log := p.log.With("topic", f.r.Topic, "partition", f.r.Partition, "offset", f.r.Offset)
	m := readMeta(f.r)
	m.due = time.Now().Add(wait)
	tier := len(p.cfg.RetryDelays)
	c := &kgo.Record{Topic: p.cfg.retryTopic(tier), Key: f.r.Key, Value: f.r.Value,
		Headers: m.headers(f.r,
			kgo.RecordHeader{Key: envelope.HeaderParks, Value: []byte(strconv.Itoa(m.parks + 1))},
			kgo.RecordHeader{Key: envelope.HeaderPaused, Value: []byte(f.env.Campaign)})}
	if err := p.produce(ctx, c, log); err != nil {
		if errors.Is(err, errTooLarge) {
			return p.deadLetter(ctx, f.r, m, "too-large", "the parked copy exceeds the broker's message size", log)
		}
		return false
	}
	p.qm.parked.Inc()
	p.wrote("defer", c.Topic)
	return true
}

// resumed reports whether r is the copy of a record of a paused campaign
// (envelope.HeaderPaused) whose campaign is known to run again (or was
// cancelled): it is taken before its due time. The campaign's state is
// kept read while its copies wait (every campaign.Refresh, one pipelined
// Redis read for every campaign).
func (p *Pacer) resumed(r *kgo.Record) bool {
	if p.camps == nil {
		return false
	}
	name := envelope.Header(r, envelope.HeaderPaused)
	if name == "" {
		return false
	}
	st, known := p.camps.Watched(name)
	return known && st != control.Paused
}
