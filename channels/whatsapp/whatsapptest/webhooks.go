package whatsapptest

import (
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/pacerhq/pacer/channels/internal/fakeprovider"
)

// Webhooks makes a [Server] send signed status webhooks for the messages
// it accepted, as the Cloud API does (providers.md §8.2): a "sent" and a
// "delivered" per message (and a "read" for a share of them), or a
// "failed" with 131026, 131049 or 130429 for the configured shares of
// recipients, or with [MessagingLimitCode] for a template past its portfolio's
// messaging limit (failures the synchronous answer did not show). Each
// webhook is a POST of one status, signed
// X-Hub-Signature-256 with AppSecret, retried until answered 2xx.
type Webhooks struct {
	// URL receives the POSTs (a pacer webhook's /webhook/whatsapp).
	URL string
	// AppSecret signs them (HMAC-SHA256 of the raw body).
	AppSecret []byte
	// Delay is how long after the accepted send the first status leaves.
	Delay time.Duration
	// Undeliverable is the share (0..1) of recipients whose messages fail
	// with 131026; MarketingLimit the share failing with 131049. A
	// recipient's fate is fixed by a hash of its number, so all its
	// messages share it.
	Undeliverable, MarketingLimit float64
	// Throttled is the share (0..1) of recipients whose messages, accepted
	// by the answer, fail with 130429 "Rate limit hit" in their status
	// webhook: Meta's own webhook errors example carries it (providers.md
	// §1.2, [W-WH] developers.secure.facebook.com/documentation/business-messaging/whatsapp/webhooks/reference/messages/errors).
	// A recipient's fate is fixed by a hash of its number, as above.
	Throttled float64
	// Read is the share (0..1) of delivered messages also read: a "read"
	// status follows their "delivered". A recipient's fate is fixed by a
	// hash of its number, as above.
	Read float64
	// Duplicate is the share (0..1) of webhooks sent twice.
	Duplicate float64
	// Reorder is the share (0..1) of messages whose statuses are sent in
	// reverse order (a "delivered" before its "sent", a "read" before its
	// "delivered").
	Reorder float64
	// Retry is the wait between attempts of a webhook not answered 2xx;
	// default 100 ms, doubling up to 2 s, for up to Attempts (default 50):
	// over 90 s of waits (plus each attempt's own time: a receiver whose
	// Kafka is down holds it up to its produce timeout) before a webhook
	// is given up, which covers an outage of a minute of the receiver or
	// its Kafka. Meta retries for up to 7 days (docs/webhooks.md).
	Retry    time.Duration
	Attempts int
	// Client sends the POSTs; default http.DefaultClient.
	Client *http.Client
}

// Fails returns the error code with which w's status webhooks fail every
// message to recipient to (its number as the request's "to" spells it):
// 131026 for the Undeliverable share of recipients, 131049 for the
// MarketingLimit share, 0 for the others (delivered, unless past a
// messaging limit).
func (w Webhooks) Fails(to string) int {
	switch x := fakeprovider.Share(to); {
	case x < w.Undeliverable:
		return 131026
	case x < w.Undeliverable+w.MarketingLimit:
		return 131049
	}
	return 0
}

// WebhookStats counts what the webhook sender did: Posts answered 2xx
// (duplicates included), Retries (attempts not answered 2xx), Dropped
// (webhooks given up after Attempts), and the statuses sent by kind,
// duplicates not counted twice (FailedLimit: failed with
// [MessagingLimitCode], past the messaging limit).
type WebhookStats struct {
	Posts, Retries, Dropped                           int64
	Sent, Delivered, Read, Failed131026, Failed131049 int64
	FailedLimit, Failed130429                         int64
}

type webhookSender struct {
	cfg   Webhooks
	hooks fakeprovider.Hooks
	kinds [7]atomic.Int64 // sent, delivered, 131026, 131049, MessagingLimitCode, read, 130429
}

// SendWebhooks makes s send status webhooks per cfg for every message it
// accepts from now on. Call it before the sends.
func (s *Server) SendWebhooks(cfg Webhooks) {
	h := &webhookSender{cfg: cfg, hooks: fakeprovider.Hooks{URL: cfg.URL, Retry: cfg.Retry, Attempts: cfg.Attempts, Client: cfg.Client}}
	s.hooks.Install(h, &h.hooks)
}

// WaitWebhooks waits until every webhook due so far was answered 2xx or
// given up, or ctx ends, and returns the counts.
func (s *Server) WaitWebhooks(ctx context.Context) (WebhookStats, error) {
	h, posts, retries, dropped, err := s.hooks.Wait(ctx)
	if h == nil {
		return WebhookStats{}, nil
	}
	return WebhookStats{Posts: posts, Retries: retries, Dropped: dropped,
		Sent: h.kinds[0].Load(), Delivered: h.kinds[1].Load(), Read: h.kinds[5].Load(),
		Failed131026: h.kinds[2].Load(), Failed131049: h.kinds[3].Load(), FailedLimit: h.kinds[4].Load(), Failed130429: h.kinds[6].Load()}, err
}

// accepted schedules the webhooks of a message accepted as wamid; cb is
// the request's biz_opaque_callback_data, echoed in each; over: past its
// portfolio's messaging limit.
func (h *webhookSender) accepted(key, to, cb, wamid string, over bool, at time.Time) {
	type status struct {
		name string
		code int
		kind int // index in kinds
		dup  bool
	}
	sts := []status{{"sent", 0, 0, false}, {"delivered", 0, 1, false}}
	switch code := h.cfg.Fails(to); {
	case over:
		sts = []status{{"failed", MessagingLimitCode, 4, false}}
	case code == 131026:
		sts = []status{{"failed", 131026, 2, false}}
	case code == 131049:
		sts = []status{{"failed", 131049, 3, false}}
	case fakeprovider.Share(to) < h.cfg.Undeliverable+h.cfg.MarketingLimit+h.cfg.Throttled:
		sts = []status{{"failed", 130429, 6, false}}
	case fakeprovider.Share(to) >= 1-h.cfg.Read:
		sts = append(sts, status{"read", 0, 5, false})
	}
	for i := range sts {
		sts[i].dup = h.hooks.Chance(h.cfg.Duplicate)
	}
	if h.hooks.Chance(h.cfg.Reorder) {
		for i, j := 0, len(sts)-1; i < j; i, j = i+1, j-1 {
			sts[i], sts[j] = sts[j], sts[i]
		}
	}
	h.hooks.Go(func() {
		time.Sleep(h.cfg.Delay)
		for _, st := range sts {
			body := statusBody(key, to, cb, wamid, st.name, st.code, at)
			mac := hmac.New(sha256.New, h.cfg.AppSecret)
			mac.Write(body)
			sig := "sha256=" + hex.EncodeToString(mac.Sum(nil))
			sign := func() http.Header { return http.Header{"X-Hub-Signature-256": {sig}} }
			h.hooks.Post(body, sign)
			if st.dup {
				h.hooks.Post(body, sign)
			}
			h.kinds[st.kind].Add(1)
		}
	})
}

// statusBody is a Cloud API status webhook of one status, in the shape
// Meta documents (entry[].changes[].value.statuses[]).
func statusBody(key, to, cb, wamid, status string, code int, at time.Time) []byte {
	st := map[string]any{"id": wamid, "status": status, "timestamp": strconv.FormatInt(at.Unix(), 10),
		"recipient_id": strings.TrimPrefix(to, "+")}
	if cb != "" {
		st["biz_opaque_callback_data"] = cb
	}
	if code != 0 {
		title := map[int]string{131026: "Message undeliverable", 131049: "This message was not delivered to maintain healthy ecosystem engagement.",
			MessagingLimitCode: "Spam rate limit hit", 130429: "Rate limit hit"}[code]
		st["errors"] = []map[string]any{{"code": code, "title": title}}
	}
	b, _ := json.Marshal(map[string]any{"object": "whatsapp_business_account", "entry": []any{map[string]any{
		"id": "WABA-" + key, "changes": []any{map[string]any{"field": "messages", "value": map[string]any{
			"messaging_product": "whatsapp", "metadata": map[string]any{"display_phone_number": key, "phone_number_id": key},
			"statuses": []any{st}}}}}}})
	return b
}

// Send posts each of bodies (a Cloud API message request) to the fake's
// /v21.0/<key>/messages in turn, as a test's traffic for its webhooks,
// and returns an error naming the first one not answered 200.
func (s *Server) Send(key string, bodies ...string) error {
	for i, body := range bodies {
		resp, err := http.Post(s.URL()+"/v21.0/"+key+"/messages", "application/json", strings.NewReader(body))
		if err != nil {
			return fmt.Errorf("send %d: %w", i, err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			return fmt.Errorf("send %d: HTTP %d, want 200", i, resp.StatusCode)
		}
	}
	return nil
}
