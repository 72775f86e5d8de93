package ingest

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"unicode"
	"unicode/utf8"

	"github.com/pacerhq/pacer/bucket"
	"github.com/pacerhq/pacer/pacer/control"
	"github.com/pacerhq/pacer/pacer/ingest/quota"
)

// CampaignControl is campaign ownership and control for tenants;
// *control.Store implements it. A campaign belongs to the tenant that
// first published to it through this API, and so does a pacing key (see
// [control.Store.Claim]).
type CampaignControl interface {
	// Claim makes the campaigns Redis holds nothing of and the pacing keys
	// no tenant owns the tenant's, all or nothing (nothing when any is
	// another's), and returns each one's owner ("" for none; a free one as
	// tenant).
	Claim(ctx context.Context, channel, tenant string, campaigns, keys []string) (campaignOwners, keyOwners []string, err error)
	// TenantCampaigns lists at most n of the tenant's campaigns, the one
	// published to last first.
	TenantCampaigns(ctx context.Context, channel, tenant string, n int) ([]control.Status, error)
	// Find reads a campaign's status, as `pacer campaign status` does.
	Find(ctx context.Context, channel, campaign string) (st control.Status, known bool, err error)
	// SetState sets a campaign's state, as `pacer campaign pause` does.
	SetState(ctx context.Context, channel, campaign string, st control.State) (old control.State, err error)
}

// Campaign list bounds: GET /v1/channels/{channel}/campaigns?limit=N.
const (
	// DefaultCampaigns is how many campaigns a list answers without limit.
	DefaultCampaigns = 100
	// MaxCampaigns is the largest limit a list accepts.
	MaxCampaigns = 1000
)

// CampaignList is the body of GET /v1/channels/{channel}/campaigns.
type CampaignList struct {
	Campaigns []control.StatusJSON `json:"campaigns"`
}

// StateChange is the body of a 200 to POST .../campaigns/{campaign}/pause,
// /resume or /cancel.
type StateChange struct {
	Campaign string `json:"campaign"`
	// State is the state set: running, paused or cancelled.
	State string `json:"state"`
	// Previous is the state it replaced.
	Previous string `json:"previous_state"`
}

// campaignsAllow and campaignAllow are what the campaign paths allow (a
// GET pattern serves HEAD too).
const (
	campaignsAllow = "GET, HEAD"
	actionAllow    = "POST"
)

// registerCampaigns adds the campaign paths to mux.
func (s *Server) registerCampaigns(mux *http.ServeMux) {
	mux.HandleFunc("GET /v1/channels/{channel}/campaigns", s.listCampaigns)
	mux.HandleFunc("/v1/channels/{channel}/campaigns", s.notAllowed(campaignsAllow))
	mux.HandleFunc("GET /v1/channels/{channel}/campaigns/{campaign}", s.getCampaign)
	mux.HandleFunc("/v1/channels/{channel}/campaigns/{campaign}", s.notAllowed(campaignsAllow))
	for verb, st := range map[string]control.State{"pause": control.Paused, "resume": control.Running, "cancel": control.Cancelled} {
		mux.HandleFunc("POST /v1/channels/{channel}/campaigns/{campaign}/"+verb, func(w http.ResponseWriter, r *http.Request) {
			s.setCampaignState(w, r, verb, st)
		})
		mux.HandleFunc("/v1/channels/{channel}/campaigns/{campaign}/"+verb, s.notAllowed(actionAllow))
	}
}

// campaignRequest authenticates r and checks its channel, its campaign
// (when the path has one) and then check's problem (when check is not
// nil), answering the refusal itself (nil tenant): 401, 404
// unknown-channel, 403 forbidden-channel (as a publish), 400 naming
// campaign or check's field; each costs the client IP only. A valid
// request is then charged one request of the ip and tenant tiers, as GET
// /v1/messages/{id} is, and answers their RateLimit fields.
func (s *Server) campaignRequest(w http.ResponseWriter, r *http.Request, campaign bool, check func() *problem) (*Tenant, string, string) {
	tenant := s.authenticate(w, r)
	if tenant == nil {
		return nil, "", ""
	}
	channel, name := r.PathValue("channel"), r.PathValue("campaign")
	if !s.serves(channel) {
		s.refuse(w, r, problem{Type: "https://pacer.dev/problems/unknown-channel", Title: "Unknown channel", Status: http.StatusNotFound,
			Detail: fmt.Sprintf("channel %q is not served here (%s)", channel, strings.Join(s.cfg.Channels, ", "))})
		return nil, "", ""
	}
	if !tenant.Allowed(channel) {
		s.refuse(w, r, problem{Type: "https://pacer.dev/problems/forbidden-channel", Title: "Channel not allowed", Status: http.StatusForbidden,
			Detail: fmt.Sprintf("tenant %q may not publish to channel %q, so has no campaigns there", tenant.ID, channel)})
		return nil, "", ""
	}
	if campaign {
		if reason := badCampaign(name); reason != "" {
			s.refuse(w, r, problem{Type: "https://pacer.dev/problems/invalid-path", Title: "Invalid path", Status: http.StatusBadRequest,
				Detail:        "campaign: " + reason,
				InvalidParams: []invalidParam{{Name: "campaign", Reason: reason}}})
			return nil, "", ""
		}
	}
	if check != nil {
		if p := check(); p != nil {
			s.refuse(w, r, *p)
			return nil, "", ""
		}
	}
	tiers := []quota.Tier{
		s.ipTier(r),
		{Name: "tenant", Key: s.deps.Keys.Ingest("tenant", tenant.ID), Unit: quota.PerRequest,
			Bucket: &bucket.Limit{PerSecond: tenant.RequestsPerSecond, Burst: tenant.Burst}},
	}
	if !s.charge(w, r, tiers) {
		return nil, "", ""
	}
	return tenant, channel, name
}

// badCampaign returns what is wrong with a campaign name of a path, or ""
// when nothing is: it must be valid UTF-8 without control characters (a
// name the path can carry at all; an envelope's campaign is not checked
// further).
func badCampaign(c string) string {
	switch {
	case c == "":
		return "required"
	case !utf8.ValidString(c):
		return "not valid UTF-8"
	case strings.IndexFunc(c, unicode.IsControl) >= 0:
		return "has a control character"
	}
	return ""
}

// unknownCampaign answers 404 for a campaign the tenant does not own:
// never published by it, another tenant's, or published outside the API.
// The three are answered alike, so a tenant learns nothing of another's
// campaigns.
func unknownCampaign(w http.ResponseWriter, channel, campaign string) {
	writeProblem(w, problem{Type: "https://pacer.dev/problems/unknown-campaign", Title: "Unknown campaign", Status: http.StatusNotFound,
		Detail: fmt.Sprintf("no campaign %q of channel %q published by this tenant is known", campaign, channel)})
}

// controlFailed answers 503 for a campaign store that did not answer.
func (s *Server) controlFailed(w http.ResponseWriter, what string, err error) {
	s.m.redisErrors.Inc()
	s.log.Warn("redis: "+what+" failed; answering 503", "err", err)
	w.Header().Set("Retry-After", "1")
	writeProblem(w, problem{Type: "https://pacer.dev/problems/control-unavailable", Title: "Campaign store unavailable",
		Status: http.StatusServiceUnavailable, Detail: "the campaign store does not answer; retry later"})
}

// listCampaigns answers GET /v1/channels/{channel}/campaigns[?limit=N]:
// the tenant's campaigns of the channel with their status, the one it
// published to last first, at most limit (1..[MaxCampaigns], default
// [DefaultCampaigns]).
func (s *Server) listCampaigns(w http.ResponseWriter, r *http.Request) {
	n := DefaultCampaigns
	limit := func() *problem {
		q := r.URL.Query()
		if !q.Has("limit") {
			return nil
		}
		l, err := strconv.Atoi(q.Get("limit"))
		if err != nil || l < 1 || l > MaxCampaigns {
			reason := fmt.Sprintf("must be a whole number in 1..%d", MaxCampaigns)
			return &problem{Type: "https://pacer.dev/problems/invalid-query", Title: "Invalid query", Status: http.StatusBadRequest,
				Detail: fmt.Sprintf("limit %q: %s", q.Get("limit"), reason), InvalidParams: []invalidParam{{Name: "limit", Reason: reason}}}
		}
		n = l
		return nil
	}
	tenant, channel, _ := s.campaignRequest(w, r, false, limit)
	if tenant == nil {
		return
	}
	list := CampaignList{Campaigns: []control.StatusJSON{}}
	if s.deps.Control != nil {
		sts, err := s.deps.Control.TenantCampaigns(r.Context(), channel, tenant.ID, n)
		if err != nil {
			s.controlFailed(w, "campaign list", err)
			return
		}
		for _, st := range sts {
			list.Campaigns = append(list.Campaigns, st.JSON())
		}
	}
	w.Header().Set("Content-Type", "application/json")
	json.NewEncoder(w).Encode(list)
}

// owned returns the status of campaign when tenant owns it, else answers
// 404 (or 503) and returns false.
func (s *Server) owned(w http.ResponseWriter, r *http.Request, tenant *Tenant, channel, campaign string) (control.Status, bool) {
	if s.deps.Control == nil {
		unknownCampaign(w, channel, campaign)
		return control.Status{}, false
	}
	st, known, err := s.deps.Control.Find(r.Context(), channel, campaign)
	if err != nil {
		s.controlFailed(w, "campaign status", err)
		return control.Status{}, false
	}
	if !known || st.Tenant != tenant.ID {
		unknownCampaign(w, channel, campaign)
		return control.Status{}, false
	}
	return st, true
}

// getCampaign answers GET /v1/channels/{channel}/campaigns/{campaign}: the
// campaign's status as `pacer campaign status --json` prints it, when the
// tenant owns it; else 404.
func (s *Server) getCampaign(w http.ResponseWriter, r *http.Request) {
	tenant, channel, campaign := s.campaignRequest(w, r, true, nil)
	if tenant == nil {
		return
	}
	st, ok := s.owned(w, r, tenant, channel, campaign)
	if !ok {
		return
	}
	w.Header().Set("Content-Type", "application/json")
	json.NewEncoder(w).Encode(st.JSON())
}

// setCampaignState answers POST .../campaigns/{campaign}/pause, /resume
// and /cancel: it sets the state of a campaign the tenant owns, as
// `pacer campaign pause|resume|cancel` does (running pacers apply it
// within about a second), and logs the change with the tenant, the old and
// the new state. Another's campaign is 404.
func (s *Server) setCampaignState(w http.ResponseWriter, r *http.Request, verb string, want control.State) {
	tenant, channel, campaign := s.campaignRequest(w, r, true, nil)
	if tenant == nil {
		return
	}
	if _, ok := s.owned(w, r, tenant, channel, campaign); !ok {
		return
	}
	old, err := s.deps.Control.SetState(r.Context(), channel, campaign, want)
	if err != nil {
		s.controlFailed(w, "campaign "+verb, err)
		return
	}
	s.log.Info("campaign state set", "tenant", tenant.ID, "channel", channel, "campaign", campaign,
		"old", old.Name(), "new", want.Name())
	w.Header().Set("Content-Type", "application/json")
	json.NewEncoder(w).Encode(StateChange{Campaign: campaign, State: want.Name(), Previous: old.Name()})
}

// maxOwnedKeys bounds the pacing keys a process remembers as owned; past
// it the memory starts over (a forgotten key costs one Redis call again).
const maxOwnedKeys = 100_000

// ownedKeys remembers pacing keys this process saw claimed by a tenant:
// (channel, key) -> tenant. An owner never changes once set, so a key
// remembered as the publishing tenant's needs no Redis call.
type ownedKeys struct {
	mu sync.Mutex
	m  map[[2]string]string
}

func (o *ownedKeys) owner(channel, key string) string {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.m[[2]string{channel, key}]
}

func (o *ownedKeys) add(channel, tenant string, keys []string) {
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.m == nil || len(o.m)+len(keys) > maxOwnedKeys {
		o.m = make(map[[2]string]string, len(keys))
	}
	for _, k := range keys {
		o.m[[2]string{channel, k}] = tenant
	}
}

// claim claims the campaigns and pacing keys of a publish's valid lines
// for tenant, all or nothing, before anything is produced. It returns the
// refusal of the lines naming a campaign or a pacing key another owns (or
// a campaign published outside the API): a 409 naming the field campaign
// (type campaign-taken) or key (type key-taken, when no campaign is
// taken) of each such line; nil when every one is the tenant's, or no
// Control is set. Pacing keys this process saw claimed by the tenant are
// not sent again, so a request of known keys and no campaign makes no
// Redis call. A campaign store that does not answer is a 503, except for
// a publish naming no campaign under PACER_REDIS_FAILURE=local, whose
// pacing keys are then accepted unchecked.
func (s *Server) claim(ctx context.Context, channel string, tenant *Tenant, lines []line) *bodyProblem {
	if s.deps.Control == nil {
		return nil
	}
	var names, keys []string
	seen, seenKey := map[string]bool{}, map[string]bool{}
	for _, l := range lines {
		if l.err != nil {
			continue
		}
		if c := l.env.Campaign; c != "" && !seen[c] {
			seen[c] = true
			names = append(names, c)
		}
		if k := l.env.Key; !seenKey[k] && s.ownedKeys.owner(channel, k) != tenant.ID {
			seenKey[k] = true
			keys = append(keys, k)
		}
	}
	if len(names) == 0 && len(keys) == 0 {
		return nil
	}
	s.m.redisCalls.WithLabelValues("claim").Inc()
	owners, keyOwners, err := s.deps.Control.Claim(ctx, channel, tenant.ID, names, keys)
	if err != nil {
		s.m.redisErrors.Inc()
		if len(names) == 0 && s.cfg.RedisFailure == "local" {
			// PACER_REDIS_FAILURE=local keeps accepting without Redis:
			// pacing keys go unchecked until it answers again.
			s.log.Warn("redis: pacing key claim failed; accepting unchecked (PACER_REDIS_FAILURE=local)", "channel", channel, "err", err)
			return nil
		}
		s.log.Warn("redis: campaign and pacing key claim failed; answering 503", "channel", channel, "err", err)
		return bodyRefusal(problem{Type: "https://pacer.dev/problems/control-unavailable", Title: "Campaign store unavailable",
			Status: http.StatusServiceUnavailable, Detail: "the campaign store does not answer; retry later"}, "Retry-After", "1")
	}
	taken, takenKey := map[string]bool{}, map[string]bool{}
	for i, o := range owners {
		if o != tenant.ID {
			taken[names[i]] = true
		}
	}
	for i, o := range keyOwners {
		if o != tenant.ID {
			takenKey[keys[i]] = true
		}
	}
	if len(taken) == 0 && len(takenKey) == 0 {
		s.ownedKeys.add(channel, tenant.ID, keys)
		return nil
	}
	const reason = "this campaign name is taken: it was first published by another tenant, or outside this API; choose another name"
	const keyReason = "this pacing key is taken: another tenant first published to it; publish only to your own pacing keys"
	p := problem{Type: "https://pacer.dev/problems/campaign-taken", Title: "Campaign name taken", Status: http.StatusConflict}
	if len(taken) == 0 {
		p.Type, p.Title = "https://pacer.dev/problems/key-taken", "Pacing key taken"
	}
	for _, l := range lines {
		if l.err != nil {
			continue
		}
		if taken[l.env.Campaign] {
			p.InvalidParams = append(p.InvalidParams, invalidParam{Line: l.n, ID: l.env.ID, Name: "campaign", Reason: reason})
		}
		if takenKey[l.env.Key] {
			p.InvalidParams = append(p.InvalidParams, invalidParam{Line: l.n, ID: l.env.ID, Name: "key", Reason: keyReason})
		}
	}
	switch {
	case len(takenKey) == 0:
		p.Detail = fmt.Sprintf("%d envelope(s) name a campaign this tenant does not own: %s; nothing was published", len(p.InvalidParams), reason)
	case len(taken) == 0:
		p.Detail = fmt.Sprintf("%d envelope(s) name a pacing key this tenant does not own: %s; nothing was published", len(p.InvalidParams), keyReason)
	default:
		p.Detail = fmt.Sprintf("%d field(s) name a campaign or pacing key this tenant does not own; nothing was published", len(p.InvalidParams))
	}
	return bodyRefusal(p)
}
