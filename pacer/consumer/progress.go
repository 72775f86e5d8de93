package consumer

import (
	"context"
	"sync/atomic"
	"time"

	"github.com/pacerhq/pacer/internal/tick"
)

// tally counts finished records by how they finished, for the progress log
// line and the summary when Run stops: each where its metric is counted
// (pacer_delivered_total, _duplicates_skipped_total, _requeued_total,
// _retries_total, _dlq_total), so the lines and the metrics agree.
type tally struct {
	delivered, duplicates, requeued, retried, deadLettered atomic.Int64
}

// count adds one record that ended in kind k.
func (t *tally) count(k kind) {
	switch k {
	case delivered:
		t.delivered.Add(1)
	case duplicate:
		t.duplicates.Add(1)
	case requeued:
		t.requeued.Add(1)
	case retrying:
		t.retried.Add(1)
	case deadLettered:
		t.deadLettered.Add(1)
	}
}

type tallySnapshot struct{ delivered, duplicates, requeued, retried, deadLettered int64 }

func (t *tally) snapshot() tallySnapshot {
	return tallySnapshot{t.delivered.Load(), t.duplicates.Load(), t.requeued.Load(), t.retried.Load(), t.deadLettered.Load()}
}

// summary returns slog attributes for the totals over d: counts and the
// delivered rate in msgs/s.
func (t *tally) summary(d time.Duration) []any {
	s := t.snapshot()
	return s.attrs(d)
}

func (s tallySnapshot) attrs(d time.Duration) []any {
	rate := 0.0
	if d > 0 {
		rate = float64(s.delivered) / d.Seconds()
	}
	return []any{"delivered", s.delivered, "dead_lettered", s.deadLettered, "requeued", s.requeued,
		"retried", s.retried, "duplicates_skipped", s.duplicates, "seconds", d.Round(time.Millisecond).Seconds(),
		"delivered_per_second", float64(int64(rate*10)) / 10}
}

// progressLoop logs, every Config.ProgressEvery while anything happened,
// what finished in the interval, until ctx ends.
func (p *Pacer) progressLoop(ctx context.Context) {
	last, lastAt := p.tally.snapshot(), time.Now()
	tick.Every(ctx, p.cfg.ProgressEvery, func(now time.Time) {
		cur := p.tally.snapshot()
		d := tallySnapshot{cur.delivered - last.delivered, cur.duplicates - last.duplicates,
			cur.requeued - last.requeued, cur.retried - last.retried, cur.deadLettered - last.deadLettered}
		if d != (tallySnapshot{}) {
			p.log.Info("progress", d.attrs(now.Sub(lastAt))...)
		}
		last, lastAt = cur, now
	})
}
