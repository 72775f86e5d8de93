package bucket

import "strconv"

// DefaultPrefix starts every Redis key when no prefix is configured.
const DefaultPrefix = "pacer"

// Keys names every Redis key of a pacing key: its bucket and cooldown, its
// sub-buckets, its adaptive state (package adapt), its breaker and its
// ledger ids (package ledger). All of them come from one function, so the
// limiter, the adapter and the ledger built from one Keys cannot disagree
// on a name (the ledger's claim reads the limiter's cooldown). Get it from
// [Limiter.Keys], or [NewKeys] for a prefix.
//
// For channel "whatsapp", pacing key "106540352242922" and prefix "pacer":
//
//	pacer:{whatsapp:106540352242922}:bucket             Bucket
//	pacer:{whatsapp:106540352242922}:cooldown           Cooldown
//	pacer:{whatsapp:106540352242922}:sub:<sub>:bucket   SubBucket
//	pacer:{whatsapp:106540352242922}:sub:<sub>:cooldown SubCooldown
//	pacer:{whatsapp:106540352242922}:aimd               AIMD
//	pacer:{whatsapp:106540352242922}:achieved           Achieved
//	pacer:{whatsapp:106540352242922}:pairs              Pairs
//	pacer:{whatsapp:106540352242922}:breaker            Breaker
//	pacer:{whatsapp:106540352242922}:ids:<generation>   IDs (Redis Cluster)
//	pacer:{whatsapp:106540352242922}:limit              Limit
//	pacer:{<scope>:<key>}:window                        Window
//	pacer:{whatsapp}:campaign:<campaign>                Campaign
//	pacer:{whatsapp}:tenant-campaigns:<tenant>          TenantCampaigns
//	pacer:{whatsapp}:ids:<generation>                   ChannelIDs
//	pacer:{whatsapp}:horizon:<group>:<topic>:<part>     Horizon
//
// The braces are a Redis Cluster hash tag: every key of a pacing key lives
// in one slot, as a script touching several requires (a "}" inside the
// channel or key ends the tag early, but the keys still share it). The
// zero Keys uses [DefaultPrefix].
type Keys struct {
	prefix string
}

// NewKeys returns the Keys of prefix; "" means [DefaultPrefix].
func NewKeys(prefix string) Keys {
	return Keys{prefix: prefix}
}

// Prefix returns the prefix that starts every key.
func (k Keys) Prefix() string {
	if k.prefix == "" {
		return DefaultPrefix
	}
	return k.prefix
}

// name is the one function that names a piece of a pacing key's state:
// "<prefix>:{<channel>:<key>}:<kind>".
func (k Keys) name(channel, key, kind string) string {
	return k.Prefix() + ":{" + channel + ":" + key + "}:" + kind
}

// Bucket is the bucket hash of a pacing key (fields utokens, ts_us).
func (k Keys) Bucket(channel, key string) string { return k.name(channel, key, "bucket") }

// Cooldown is the cooldown of a pacing key: its end in µs of Redis TIME.
func (k Keys) Cooldown(channel, key string) string { return k.name(channel, key, "cooldown") }

// SubBucket is the bucket hash of a sub-bucket of a pacing key, e.g. sub =
// the recipient for WhatsApp's pair limit.
func (k Keys) SubBucket(channel, key, sub string) string {
	return k.name(channel, key, "sub:"+sub+":bucket")
}

// SubCooldown is the cooldown of a sub-bucket.
func (k Keys) SubCooldown(channel, key, sub string) string {
	return k.name(channel, key, "sub:"+sub+":cooldown")
}

// AIMD is the hash of a pacing key's adapted rate (package adapt).
func (k Keys) AIMD(channel, key string) string { return k.name(channel, key, "aimd") }

// Achieved is the achieved rate of a pacing key as every replica reports
// the sends it saw accepted (package adapt): the estimate of a provider's
// capacity when throttles persist.
func (k Keys) Achieved(channel, key string) string { return k.name(channel, key, "achieved") }

// ServerErrors is the hash counting a pacing key's server errors (HTTP
// 5xx) in the current window (package adapt).
func (k Keys) ServerErrors(channel, key string) string { return k.name(channel, key, "5xx") }

// Start is the start of a pacing key's current active spell, in µs of
// Redis TIME, kept while the key is active (package adapt): the slow start
// of a key back from idle ramps from it.
func (k Keys) Start(channel, key string) string { return k.name(channel, key, "start") }

// Pairs is the hash of a pacing key's pair cooldowns, by pair (a hash of
// the recipient, never the address) (package adapt).
func (k Keys) Pairs(channel, key string) string { return k.name(channel, key, "pairs") }

// PairLimit is the pair-limit bucket of a pacing key and a recipient,
// named by the recipient's hash (never the address), which the ledger's
// claim takes a turn of (package ledger, lua/pair_limit.lua): in the key's
// slot, so the claim's call reaches it.
func (k Keys) PairLimit(channel, key, hash string) string {
	return k.name(channel, key, "pair:"+hash)
}

// Breaker is the hash of a pacing key's circuit breaker (package adapt).
func (k Keys) Breaker(channel, key string) string { return k.name(channel, key, "breaker") }

// Suppressed is the hash of a pacing key's suppressed recipients (package
// suppress): recipient hash (never the address or token) -> entry. It is
// in the key's slot, so the ledger's claim reads it in the same call.
func (k Keys) Suppressed(channel, key string) string { return k.name(channel, key, "suppressed") }

// SuppressedExpiry is the sorted set of a pacing key's suppressions that
// expire (package suppress): recipient hash -> Unix ms of the expiry, so
// expired entries are found and removed without a scan.
func (k Keys) SuppressedExpiry(channel, key string) string {
	return k.name(channel, key, "suppressed:expiry")
}

// Portfolio is the hash of a pacing key's business portfolio (package
// portfolio): field "portfolio", the portfolio's name.
func (k Keys) Portfolio(channel, key string) string { return k.name(channel, key, "portfolio") }

// PortfolioWindow is the sorted set of a business portfolio's recipients
// of business-initiated messages (package portfolio): recipient hash ->
// Unix ms of its last one. It shares its Redis Cluster slot with
// [Keys.PortfolioMeta], not with the portfolio's pacing keys.
func (k Keys) PortfolioWindow(channel, portfolio string) string {
	return k.Prefix() + ":{portfolio:" + channel + ":" + portfolio + "}:window"
}

// PortfolioMeta is the hash of a business portfolio (package portfolio):
// "tier", "deferred", "quality", "quality_at" and "paused".
func (k Keys) PortfolioMeta(channel, portfolio string) string {
	return k.Prefix() + ":{portfolio:" + channel + ":" + portfolio + "}:meta"
}

// PortfolioAccounts is the hash of channel's provider accounts (WhatsApp
// Business Account IDs, which Meta's account webhooks name) -> business
// portfolio (package portfolio).
func (k Keys) PortfolioAccounts(channel string) string {
	return k.Prefix() + ":portfolio-accounts:" + channel
}

// Portfolios is the set of channel's business portfolio names (package
// portfolio), for the status page to list them.
func (k Keys) Portfolios(channel string) string {
	return k.Prefix() + ":portfolios:" + channel
}

// PhoneNumbers is the hash of channel's business display phone numbers
// (digits, as Meta's webhooks write them) -> pacing key (phone-number
// ID): what a webhook naming a number by its display number applies to.
func (k Keys) PhoneNumbers(channel string) string {
	return k.Prefix() + ":phone-numbers:" + channel
}

// PortfolioKeys is the set of a business portfolio's pacing keys.
func (k Keys) PortfolioKeys(channel, portfolio string) string {
	return k.Prefix() + ":{portfolio:" + channel + ":" + portfolio + "}:keys"
}

// IDs is the ledger hash of one generation of a pacing key's envelope
// ids (package ledger), used under Redis Cluster: in the key's slot, beside
// the cooldown its claims read.
func (k Keys) IDs(channel, key string, gen int64) string {
	return k.name(channel, key, "ids:"+strconv.FormatInt(gen, 10))
}

// ChannelIDs is the ledger hash of one generation of a channel's envelope
// ids, every pacing key's (package ledger), used without Redis Cluster: a
// flush of the ledger then writes one hash whatever the number of keys.
//
//	pacer:{<channel>}:ids:<generation>
func (k Keys) ChannelIDs(channel string, gen int64) string {
	return k.Prefix() + ":{" + channel + "}:ids:" + strconv.FormatInt(gen, 10)
}

// Horizon is a string: one more than the highest offset of partition of
// topic that consumer group group may have handled for channel (see
// package ledger's Horizons).
func (k Keys) Horizon(channel, group, topic string, partition int32) string {
	return k.Prefix() + ":{" + channel + "}:horizon:" + group + ":" + topic + ":" + strconv.FormatInt(int64(partition), 10)
}

// StopHorizon is a string: one more than the highest offset of partition
// of topic that consumer group group's last owner fetched for channel
// before it stopped cleanly (see package ledger's TakeStopHorizons).
func (k Keys) StopHorizon(channel, group, topic string, partition int32) string {
	return k.Prefix() + ":{" + channel + "}:stophorizon:" + group + ":" + topic + ":" + strconv.FormatInt(int64(partition), 10)
}

// Limit is a pacing key's limit set at run time (package control): a hash
// of rate and burst that replaces the channel's configured ceiling.
func (k Keys) Limit(channel, key string) string { return k.name(channel, key, "limit") }

// Campaign is the control hash of one campaign of a channel (package
// control): its state (paused, cancelled) and its counters. The hash tag is
// the channel, so a replica reads all its campaigns' states from one slot.
//
//	pacer:{<channel>}:campaign:<campaign>
func (k Keys) Campaign(channel, campaign string) string {
	return k.Prefix() + ":{" + channel + "}:campaign:" + campaign
}

// CountToken is the token of one batch of campaign counts added (package
// control): a string of the campaigns refused, kept
// control.CountTokenTTL, so the same batch sent again adds nothing. In the
// campaigns' slot.
//
//	pacer:{<channel>}:counted:<token>
func (k Keys) CountToken(channel, token string) string {
	return k.Prefix() + ":{" + channel + "}:counted:" + token
}

// Outcomes is the hash of the outcome kinds already counted for the
// message of envelope id (package control: device_delivered, read,
// failed, bounced, suppressed -> the Unix ms it was heard at; "1" when
// written by an earlier Pacer), kept control.OutcomeTTL after its
// last new kind, so a provider's duplicate or a replayed event counts
// once. In the campaigns' slot, so one call checks it and adds to the
// campaign's counters.
//
//	pacer:{<channel>}:outcomes:<id>
func (k Keys) Outcomes(channel, id string) string {
	return k.Prefix() + ":{" + channel + "}:outcomes:" + id
}

// Campaigns is the index of a channel's campaigns (package control): a
// sorted set of campaign names scored by the Unix ms of their last
// activity (published, counted, state changed), in the campaigns' slot.
//
//	pacer:{<channel>}:campaigns
func (k Keys) Campaigns(channel string) string {
	return k.Prefix() + ":{" + channel + "}:campaigns"
}

// TenantCampaigns is the index of a tenant's campaigns of a channel
// (package control): a sorted set of the campaigns the ingest API's
// tenant owns (the campaign hash's tenant field), scored by the Unix ms of
// its last publish to each, in the campaigns' slot.
//
//	pacer:{<channel>}:tenant-campaigns:<tenant>
func (k Keys) TenantCampaigns(channel, tenant string) string {
	return k.Prefix() + ":{" + channel + "}:tenant-campaigns:" + tenant
}

// KeyOwners is the hash of a channel's pacing keys owned by tenants of
// the ingest API (package control): pacing key -> the tenant that first
// published to it through the API; set once, never changed. In the
// campaigns' slot, so one script claims a publish's campaigns and keys.
//
//	pacer:{<channel>}:key-owners
func (k Keys) KeyOwners(channel string) string {
	return k.Prefix() + ":{" + channel + "}:key-owners"
}

// Window is the sliding-window counter of (scope, key), e.g. scope "tenant"
// or "ip" (package window).
func (k Keys) Window(scope, key string) string { return k.name(scope, key, "window") }

// Ingest is a piece of the ingest gateway's state (package quota): kind is
// "ip", "tenant", "tenant-day", "channel" (a tier's bucket or window), "id"
// (an accepted envelope id of a tenant) or "ikey" (an Idempotency-Key of a
// tenant), name its subject. Every ingest key shares the hash tag {ingest}:
// one request's tiers and ids are checked in one script, which Redis
// Cluster runs only on keys of one slot, so all ingest state lives on one
// node.
//
//	pacer:{ingest}:<kind>:<name>
func (k Keys) Ingest(kind, name string) string {
	return k.Prefix() + ":{ingest}:" + kind + ":" + name
}
