package consumer

import (
	"context"
	"time"

	"github.com/pacerhq/pacer/pacer/envelope"
	"github.com/pacerhq/pacer/pacer/outcomes"
	"github.com/twmb/franz-go/pkg/kgo"
)

// outcome writes env's final outcome to the outcomes topic (Deps.Outcomes)
// when env names a tenant; nothing otherwise. It never waits for Kafka:
// the record's offset does ([Pacer.afterWritten]).
func (p *Pacer) outcome(env *envelope.Envelope, kind, reason, code string) {
	if p.outcomes == nil || env == nil || env.Tenant == "" {
		return
	}
	p.outcomes.Write(outcomes.Record{Tenant: env.Tenant, MessageID: env.ID, Campaign: env.Campaign,
		Channel: p.cfg.Channel, Outcome: kind, Reason: reason, Code: code, At: time.Now().UTC()})
}

// deadLetterOutcome writes the outcome of r, whose DLQ copy Kafka
// acknowledged with reason dlqReason (outcomes.FromDeadLetter). A record
// that does not parse names no tenant and has none.
func (p *Pacer) deadLetterOutcome(r *kgo.Record, dlqReason string) {
	if p.outcomes == nil {
		return
	}
	env, err := envelope.Parse(r.Value)
	if err != nil {
		return
	}
	kind, reason, code := outcomes.FromDeadLetter(dlqReason)
	p.outcome(&env, kind, reason, code)
}

// afterWritten calls fn once the ledger's marks and the outcome records
// made so far are written (ledger.Batcher.AfterWritten, then
// outcomes.Writer.AfterAcked): a worker marks an offset for commit in fn,
// so a commit never passes a record whose mark or outcome a crash could
// lose.
func (p *Pacer) afterWritten(fn func()) {
	if p.outcomes == nil {
		p.ledger.AfterWritten(fn)
		return
	}
	p.ledger.AfterWritten(func() { p.outcomes.AfterAcked(fn) })
}

// outcomesAcked waits until the outcome records written so far are
// acknowledged, or ctx ends (its error); nil at once without
// Deps.Outcomes.
func (p *Pacer) outcomesAcked(ctx context.Context) error {
	if p.outcomes == nil {
		return nil
	}
	return p.outcomes.Acked(ctx)
}

// deliveredOutcome writes env's outcome delivered (see [Pacer.outcome]).
func (p *Pacer) deliveredOutcome(env *envelope.Envelope) {
	p.outcome(env, outcomes.Delivered, "", "")
}
