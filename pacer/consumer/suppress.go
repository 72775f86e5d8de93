package consumer

import (
	"context"
	"time"

	"github.com/pacerhq/pacer/channels"
	"github.com/pacerhq/pacer/pacer/ledger"
	"github.com/pacerhq/pacer/pacer/suppress"
)

// recipient is what f's claim checks in its key's suppressions: the
// recipient's hash, or nothing without a suppression store. A message
// whose envelope has category marketing is marked so, and only it is
// refused by an entry for marketing messages only (WhatsApp 131049).
// With a pair limit (Config.Pair) the claim takes a turn of it too.
func (p *Pacer) recipient(f *flight) ledger.Recipient {
	if f.env.To == "" || (p.suppress == nil && p.cfg.Pair.Off()) {
		return ledger.Recipient{}
	}
	return ledger.Recipient{Hash: suppress.Hash(f.env.To), Marketing: f.env.Marketing(),
		Pair: p.cfg.Pair, NoSuppression: p.suppress == nil}
}

// suppressed dead-letters a record whose claim found its recipient
// suppressed for reason: "suppressed:<reason>" in its DLQ record, the
// label "suppressed" in pacer_dlq_total, and reason (bounded to the known
// ones) in pacer_suppressed_total. Nothing was claimed and no request
// made.
func (p *Pacer) suppressed(reason string) outcome {
	p.m.suppressedBy(reason).Inc()
	return dead("suppressed:"+reason, "the recipient is suppressed for this pacing key ("+reason+"): no request made; `pacer suppress remove` ends it")
}

// gone suppresses f's recipient for its pacing key, the provider having
// answered that it is dead for the sender (APNs 410 with its timestamp,
// FCM UNREGISTERED): the key's next messages to it are dead-lettered at
// their claim. One Redis call per such answer; a failure is logged and
// counted, and the message is dead-lettered as a permanent failure either
// way.
func (p *Pacer) gone(ctx context.Context, f *flight, e *channels.Error) {
	if p.suppress == nil || f.env.To == "" {
		return
	}
	now := time.Now()
	ent := suppress.New(suppress.Hash(f.env.To), suppress.Unregistered, e.GoneSince, now)
	if _, err := p.suppress.Add(ctx, p.cfg.Channel, f.env.Key, ent); err != nil {
		p.m.redisErrors.WithLabelValues().Inc()
		f.log.Warn("recipient gone, but its suppression was not written", "err", err)
		return
	}
	p.m.suppressionsAdded.WithLabelValues(string(suppress.Unregistered)).Inc()
}
