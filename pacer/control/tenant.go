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
// no tenant field: it belongs to nobody, and no tenant sees it.

// claimScript claims campaigns for a tenant (campaign_claim.lua).
var claimScript = redis.NewScript(lua.CampaignClaim)

// ClaimCampaigns makes each of campaigns of channel that Redis holds
// nothing of the tenant's, and returns the owner of each, in order: a
// tenant id, or "" for none (a campaign that existed before without one:
// published outside the API, or counted or controlled by an operator).
// The tenant owns those whose owner is tenant; they are marked published
// now in its index (kept to [MaxIndexed]). One campaign_claim.lua call,
// atomic, in the channel's slot: two tenants claiming one name at once
// get the same owner. Campaign names must be non-empty.
func (s *Store) ClaimCampaigns(ctx context.Context, channel, tenant string, campaigns []string) (owners []string, err error) {
	if len(campaigns) == 0 {
		return nil, nil
	}
	if tenant == "" {
		return nil, fmt.Errorf("%w: tenant is required", ErrInvalid)
	}
	keys := make([]string, 0, len(campaigns)+1)
	keys = append(keys, s.keys.TenantCampaigns(channel, tenant))
	argv := make([]any, 0, len(campaigns)+3)
	argv = append(argv, tenant, time.Now().UnixMilli(), MaxIndexed)
	for _, c := range campaigns {
		if c == "" {
			return nil, fmt.Errorf("%w: campaign is required", ErrInvalid)
		}
		keys = append(keys, s.keys.Campaign(channel, c))
		argv = append(argv, c)
	}
	v, err := claimScript.Run(ctx, s.rdb, keys, argv...).Result()
	if err != nil {
		return nil, fmt.Errorf("control: claim of %d campaigns: %w", len(campaigns), err)
	}
	reply, _ := v.([]any)
	if len(reply) != len(campaigns) {
		return nil, fmt.Errorf("control: claim of %d campaigns: unexpected reply %v", len(campaigns), v)
	}
	owners = make([]string, len(reply))
	for i, o := range reply {
		owners[i], _ = o.(string)
	}
	return owners, nil
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
