package control

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/pacerhq/pacer/lua"
	"github.com/redis/go-redis/v9"
)

// A campaign published through the ingest API belongs to the tenant that
// first published to it: its hash's field tenant names it, and the
// tenant's index of the channel (bucket.Keys.TenantCampaigns) lists it. A
// campaign published by `pacer publish` or written to Kafka directly has
// no tenant field: it belongs to nobody, and no tenant sees it. A pacing
// key belongs, likewise, to the tenant that first published to it through
// the ingest API (bucket.Keys.KeyOwners); another tenant's publish naming
// it is refused, so no tenant can take another's message ids in the
// ledger, which is keyed by (channel, pacing key, id).

// claimScript claims campaigns and pacing keys for a tenant
// (campaign_claim.lua).
var claimScript = redis.NewScript(lua.CampaignClaim)

// Claim claims for tenant, all or nothing, the campaigns and pacing keys
// of a publish to channel, and returns the owner of each, in order: a
// tenant id, or "" for none (a campaign that existed before without one:
// published outside the API, or counted or controlled by an operator).
// A campaign Redis holds nothing of, or a pacing key no tenant owns, is
// free. When every one is tenant's or free, the free ones become tenant's
// (the campaigns marked published now in its index, kept to
// [MaxIndexed]) and every owner returned is tenant; when any is
// another's (or nobody's), nothing is written and a free one is returned
// as tenant. One campaign_claim.lua call, atomic, in the channel's slot:
// two tenants claiming one name or key at once get the same owner.
// Campaign names and pacing keys must be non-empty.
func (s *Store) Claim(ctx context.Context, channel, tenant string, campaigns, keys []string) (campaignOwners, keyOwners []string, err error) {
	if len(campaigns) == 0 && len(keys) == 0 {
		return nil, nil, nil
	}
	if tenant == "" {
		return nil, nil, fmt.Errorf("%w: tenant is required", ErrInvalid)
	}
	rkeys := make([]string, 0, len(campaigns)+2)
	rkeys = append(rkeys, s.keys.TenantCampaigns(channel, tenant), s.keys.KeyOwners(channel))
	argv := make([]any, 0, len(campaigns)+len(keys)+3)
	argv = append(argv, tenant, time.Now().UnixMilli(), MaxIndexed)
	for _, c := range campaigns {
		if c == "" {
			return nil, nil, fmt.Errorf("%w: campaign is required", ErrInvalid)
		}
		rkeys = append(rkeys, s.keys.Campaign(channel, c))
		argv = append(argv, c)
	}
	for _, k := range keys {
		if k == "" {
			return nil, nil, fmt.Errorf("%w: pacing key is required", ErrInvalid)
		}
		argv = append(argv, k)
	}
	v, err := claimScript.Run(ctx, s.rdb, rkeys, argv...).Result()
	if err != nil {
		return nil, nil, fmt.Errorf("control: claim of %d campaigns and %d pacing keys: %w", len(campaigns), len(keys), err)
	}
	reply, _ := v.([]any)
	var cs, ks []any
	if len(reply) == 2 {
		cs, _ = reply[0].([]any)
		ks, _ = reply[1].([]any)
	}
	if len(cs) != len(campaigns) || len(ks) != len(keys) {
		return nil, nil, fmt.Errorf("control: claim of %d campaigns and %d pacing keys: unexpected reply %v", len(campaigns), len(keys), v)
	}
	str := func(vs []any) []string {
		out := make([]string, len(vs))
		for i, o := range vs {
			out[i], _ = o.(string)
		}
		return out
	}
	return str(cs), str(ks), nil
}

// TenantCampaigns returns the statuses of the campaigns of channel that
// tenant owns, the one it published to last first, at most n of them
// (n <= 0: 100). LastActive is the campaign's score in the channel's index,
// as [Store.Recent] gives it (zero when it left the index). One
// ZREVRANGE and one pipelined HGETALL and ZSCORE per campaign, all in the
// channel's slot. A campaign in the index whose hash names another owner
// (or none: its hash was removed) is left out.
func (s *Store) TenantCampaigns(ctx context.Context, channel, tenant string, n int) ([]Status, error) {
	if n <= 0 {
		n = 100
	}
	names, err := s.rdb.ZRevRange(ctx, s.keys.TenantCampaigns(channel, tenant), 0, int64(n)-1).Result()
	if err != nil || len(names) == 0 {
		return nil, err
	}
	pipe := s.rdb.Pipeline()
	hashes := make([]*redis.MapStringStringCmd, len(names))
	scores := make([]*redis.FloatCmd, len(names))
	idx := s.keys.Campaigns(channel)
	for i, c := range names {
		hashes[i] = pipe.HGetAll(ctx, s.keys.Campaign(channel, c))
		scores[i] = pipe.ZScore(ctx, idx, c)
	}
	if _, err := pipe.Exec(ctx); err != nil && !errors.Is(err, redis.Nil) {
		return nil, err
	}
	out := make([]Status, 0, len(names))
	for i, c := range names {
		m := hashes[i].Val()
		if m["tenant"] != tenant {
			continue
		}
		st := parseStatus(c, m)
		if sc, err := scores[i].Result(); err == nil {
			st.LastActive = time.UnixMilli(int64(sc)).UTC()
		}
		out = append(out, st)
	}
	return out, nil
}

// Find reads campaign's status as `pacer campaign status` (text and
// --json) and the ingest API's campaign endpoints show it: its state and
// counters, and its owner (Status.Tenant). known is false when Redis holds
// nothing of the campaign (no state, no counter, no owner): most likely a
// typo. One HGETALL.
func (s *Store) Find(ctx context.Context, channel, campaign string) (st Status, known bool, err error) {
	m, err := s.rdb.HGetAll(ctx, s.keys.Campaign(channel, campaign)).Result()
	if err != nil {
		return Status{}, false, err
	}
	return parseStatus(campaign, m), len(m) > 0, nil
}

// StatusJSON is a campaign's status as JSON, the one shape of
// `pacer campaign status --json` and the ingest API's campaign endpoints:
// [Status] with what is not known as null instead of -1 (eta_seconds is
// null in Status itself, as on the status page).
type StatusJSON struct {
	Status
	Published *int64 `json:"published"` // null: not counted (records not written by pacer publish or ingest)
	Messages  *int64 `json:"messages"`  // null when published is
	Remaining *int64 `json:"remaining"` // null when published is
}

// JSON returns s as [StatusJSON].
func (s Status) JSON() StatusJSON {
	out := StatusJSON{Status: s}
	if s.Published >= 0 {
		out.Published, out.Messages = &s.Published, &s.Messages
	}
	if s.Remaining >= 0 {
		out.Remaining = &s.Remaining
	}
	return out
}

// Name is the state as commands, logs and the ingest API write it:
// running, paused or cancelled.
func (st State) Name() string {
	if st == Running {
		return "running"
	}
	return string(st)
}
