// Package pacer holds no code: its subpackages are Pacer's applications
// and the parts they share, each readable alone.
//
// The applications, each run by a command of cmd/pacer; none imports
// another:
//
//   - [github.com/pacerhq/pacer/pacer/consumer]: the consume-pace-send
//     loop (pacer run): reads envelopes from a channel's Kafka topics,
//     paces each pacing key with the token buckets of package bucket,
//     sends through the channel's provider adapter, and finishes every
//     record (delivered, requeued, parked, retried or dead-lettered).
//   - [github.com/pacerhq/pacer/pacer/ingest]: the HTTP ingest gateway
//     (pacer ingest): validates envelopes, checks its tiered quotas
//     (ingest/quota, over the sliding windows of ingest/window) and
//     produces them to the channel's topic.
//   - [github.com/pacerhq/pacer/pacer/statuspage]: the live status page:
//     every replica's active keys, their limits, rates and breakers, and
//     the campaigns' progress; each key's last hour kept by every replica
//     (statuspage/history); statuspage/actions adds who may read it and
//     who may act from it (pause, resume, cancel a campaign, a key's
//     limit, the DLQ).
//   - [github.com/pacerhq/pacer/pacer/webhook]: the providers' status
//     webhooks (pacer webhook): checks their signatures, produces their
//     events to pacer.<channel>.events, and applies them (suppressions,
//     campaign outcomes, unknown outcomes resolved through the ledger).
//   - [github.com/pacerhq/pacer/pacer/callback]: the tenants' callbacks
//     (run by pacer ingest): reads the outcomes topic and POSTs each
//     tenant's outcomes to its callback_url in signed batches, retried
//     with back-off, once per outcome.
//
// The parts they share, which import no application:
//
//   - [github.com/pacerhq/pacer/pacer/envelope]: the message (one JSON
//     envelope per Kafka record), its strict parsing, and the Kafka
//     headers Pacer writes beside it.
//   - [github.com/pacerhq/pacer/pacer/produce]: producer-side operations:
//     publish a campaign file, replay the DLQ, create topics, read Kafka
//     security failures.
//   - [github.com/pacerhq/pacer/pacer/ledger]: the idempotency ledger of
//     envelope ids in Redis, and its write-behind batcher.
//   - [github.com/pacerhq/pacer/pacer/portfolio]: WhatsApp business
//     portfolios in Redis: a pacing key's portfolio, its messaging-limit
//     tier, and the guard of unique recipients per moving 24 h.
//   - [github.com/pacerhq/pacer/pacer/control]: what an operator changes
//     while Pacer runs, in Redis: per-key limits, campaign states and
//     counters, and each key's policy.
//   - [github.com/pacerhq/pacer/pacer/keypace]: one pacing key as the
//     consumer's steps see it: Gate (breaker, account and pair cooldowns),
//     Slot (the next send slot at the key's adapted rate) and Report (a
//     send's outcome into AIMD, cooldowns and the breaker).
//   - [github.com/pacerhq/pacer/pacer/park]: the rules of parking: the
//     retry tier of a parked copy (due at its estimated slot), what it
//     carries (its slot, its key's rate, a strict-order chain's token), and
//     how it waits: taken early when its key's rate rose meanwhile.
//   - [github.com/pacerhq/pacer/pacer/campaign]: a consumer's live view of
//     campaign control: each campaign's state (read from pacer/control when
//     its first record comes, then refreshed) and the counts of its
//     finished records.
//   - [github.com/pacerhq/pacer/pacer/inflight]: how many records of a
//     key are in hand at once, by Little's law: its rate x its provider's
//     answer time, estimated from its answers.
//   - [github.com/pacerhq/pacer/pacer/message]: one message looked up by
//     its envelope id: its ledger entry, newest attempts and the events
//     its provider's webhooks reported (`pacer message show`, the ingest
//     API's GET /v1/messages/{id}).
//   - [github.com/pacerhq/pacer/pacer/operate]: an operator's actions,
//     validated, done and logged with who acted and the old and new
//     values, shared by the commands (pacer campaign, limit, dlq) and the
//     status page's actions.
//   - [github.com/pacerhq/pacer/pacer/outcomes]: the outcomes topic: the
//     record of a tenant's message's final outcome, and the asynchronous
//     writer the consumer commits behind.
//
// The rules between them are checked by internal/deptest.
package pacer
