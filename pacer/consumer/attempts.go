package consumer

import (
	"context"
	"errors"
	"log/slog"
	"strconv"

	"github.com/pacerhq/pacer/channels"
	"github.com/pacerhq/pacer/pacer/ledger"
)

// answerCode is what the ledger keeps of a provider's answer err to a
// request ([ledger.Attempt].Code): the provider's error code, else its
// HTTP status; "no-answer" when none came (the provider may have the
// message); "" for an acceptance.
func answerCode(err error) string {
	if err == nil {
		return ""
	}
	if channels.MaybeAccepted(err) {
		return "no-answer"
	}
	var perr *channels.Error
	if !errors.As(err, &perr) {
		return ""
	}
	if perr.Code != "" {
		return perr.Code
	}
	if perr.Status != 0 {
		return strconv.Itoa(perr.Status)
	}
	return ""
}

// attemptOutcome names what finish does with a record whose request left
// ([ledger.Attempt].Outcome): delivered, retry (to a retry tier),
// dead-lettered, unknown (cut at the drain deadline, the claim kept),
// requeued otherwise (a throttle, then no slot in time or the worker
// stopped: not counted as an attempt by the retry tiers).
func (p *Pacer) attemptOutcome(f *flight, o outcome) string {
	switch o.kind {
	case delivered:
		return "delivered"
	case retrying:
		if f.m.attempt >= p.cfg.MaxAttempts {
			return "dead-lettered"
		}
		return "retry"
	case deadLettered:
		return "dead-lettered"
	case stopped:
		if o.keepClaim {
			return "unknown"
		}
	}
	return "requeued"
}

// attempted queues, in the ledger, the attempt of f's request that o
// ends, before the release or mark o writes, so both go in one flush (no
// round trip of its own): `pacer message show` and the ingest API's
// message lookup read it. Nothing when no request left, nor for a message
// delivered at its first request (no attempt or requeue before it), most
// messages: its delivered mark says as much, and the line would double
// the ledger's memory per message (decision 0036).
func (p *Pacer) attempted(ctx context.Context, f *flight, o outcome, log *slog.Logger) {
	if !f.sent || (o.kind == delivered && f.m.attempt == 0 && f.m.requeues == 0) {
		return
	}
	a := ledger.Attempt{Outcome: p.attemptOutcome(f, o), Code: f.code}
	if err := p.ledger.Attempted(ctx, p.cfg.Channel, f.env.Key, f.env.ID, a); err != nil {
		log.Warn("could not record the attempt in the ledger", "err", err)
	}
}
