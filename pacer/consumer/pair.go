package consumer

import "time"

// pairSlack is how much later than its pair's next turn a pair-limited
// record is claimed again, on top of the claim's own lead: the provider
// counts the pair from the requests it receives, and the claim of the
// burst's first message may have been made up to the ledger's flush
// interval plus claimMargin before its request left, so a turn taken as
// soon as Redis allows it could reach the provider that much before the
// provider's token; the slack covers the spread of that lead between two
// requests (a scheduler's wake-up, a flush).
const pairSlack = 50 * time.Millisecond

// pairLimited defers a record whose claim found its pair (pacing key,
// recipient) without a turn free (Config.Pair): parked, no attempt
// counted, reason "pair-limit", until the pair's next turn (wait from
// now) plus the claim's lead and pairSlack. Nothing was claimed; the slot
// it was granted is spent. The records of one pair deferred together come
// back for the same turn: one takes it, the others are deferred again.
func (p *Pacer) pairLimited(wait time.Duration) outcome {
	return deferUntil("pair-limit", wait+p.ledger.FlushInterval()+claimMargin+pairSlack)
}
