package ingest

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"

	"github.com/pacerhq/pacer/bucket"
	"github.com/pacerhq/pacer/pacer/ingest/quota"
	"github.com/pacerhq/pacer/pacer/message"
)

// MessageLookup finds a message a tenant published; *message.Store
// implements it. found is false for an id the tenant did not publish or
// Pacer holds nothing of.
type MessageLookup interface {
	ForTenant(ctx context.Context, tenant, channel, id string) (m message.Message, found bool, err error)
}

// getMessage answers GET /v1/messages/{id}?channel=C: the message
// (package message) when the request's tenant published it, else 404,
// never 403, so a tenant learns nothing of another's ids. It costs the
// ip and tenant tiers one request each, and answers their RateLimit
// fields as a publish does.
func (s *Server) getMessage(w http.ResponseWriter, r *http.Request) {
	id, channel := r.PathValue("id"), r.URL.Query().Get("channel")
	tenant := s.authenticate(w, r)
	if tenant == nil {
		return
	}
	if channel == "" {
		s.refuse(w, r, problem{Type: "https://pacer.dev/problems/invalid-query", Title: "Invalid query", Status: http.StatusBadRequest,
			Detail:        "the query parameter channel is required (GET /v1/messages/{id}?channel=whatsapp)",
			InvalidParams: []invalidParam{{Name: "channel", Reason: "required"}}})
		return
	}
	unknown := problem{Type: "https://pacer.dev/problems/unknown-message", Title: "Unknown message",
		Detail: fmt.Sprintf("no message %q of channel %q published by this tenant is known (never published, not yet sent, or older than the ledger keeps it)", id, channel)}
	if !s.serves(channel) || !tenant.Allowed(channel) || s.deps.Messages == nil {
		unknown.Status = http.StatusNotFound
		s.refuse(w, r, unknown)
		return
	}
	tiers := []quota.Tier{
		s.ipTier(r),
		{Name: "tenant", Key: s.deps.Keys.Ingest("tenant", tenant.ID), Unit: quota.PerRequest,
			Bucket: &bucket.Limit{PerSecond: tenant.RequestsPerSecond, Burst: tenant.Burst}},
	}
	if !s.charge(w, r, tiers) {
		return
	}
	m, found, err := s.deps.Messages.ForTenant(r.Context(), tenant.ID, channel, id)
	if err != nil {
		s.m.redisErrors.Inc()
		s.log.Warn("redis: message lookup failed; answering 503", "err", err)
		w.Header().Set("Retry-After", "1")
		writeProblem(w, problem{Type: "https://pacer.dev/problems/lookup-unavailable", Title: "Message store unavailable",
			Status: http.StatusServiceUnavailable, Detail: "the message store does not answer; retry later"})
		return
	}
	if !found {
		unknown.Status = http.StatusNotFound
		writeProblem(w, unknown)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	json.NewEncoder(w).Encode(m)
}

// messagesAllow is what /v1/messages/{id} allows (a GET pattern serves
// HEAD too).
const messagesAllow = "GET, HEAD"
