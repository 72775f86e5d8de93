package sendgridtest

import (
	"context"
	"crypto/ecdsa"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"net/http"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/pacerhq/pacer/channels/internal/fakeprovider"
)

// Webhooks makes a [Server] send signed Event Webhook batches for the
// mails it accepted, as SendGrid does (providers.md §8.5): "processed"
// then "delivered" per mail, or "processed" then "bounce" for the Bounce
// share of recipients, and "delivered" then "spamreport" or
// "unsubscribe" for theirs. Each mail's events are one POST (a JSON
// array), signed with Key over the timestamp and the body
// (X-Twilio-Email-Event-Webhook-Signature and -Timestamp), retried until
// answered 2xx; custom_args come flattened into each event, pacer_id
// and pacer_campaign among them.
type Webhooks struct {
	// URL receives the POSTs (a pacer webhook's /webhook/sendgrid/{key}).
	URL string
	// Key signs them (ECDSA P-256, SHA-256; the public half is the
	// receiver's verification key).
	Key *ecdsa.PrivateKey
	// Delay is how long after the accepted send the batch leaves.
	Delay time.Duration
	// Bounce, SpamReport, Unsubscribe are the shares (0..1) of recipients
	// that bounce, report spam, unsubscribe; by a hash of the address, so
	// all mails to one share its fate.
	Bounce, SpamReport, Unsubscribe float64
	// Duplicate is the share (0..1) of batches sent twice.
	Duplicate float64
	// Retry, Attempts and Client as in whatsapptest.Webhooks: default
	// 100 ms doubling up to 2 s, 50 attempts, http.DefaultClient.
	Retry    time.Duration
	Attempts int
	Client   *http.Client
}

// WebhookStats counts what the webhook sender did: Posts answered 2xx
// (duplicates included), Retries, Dropped (batches given up), and the
// events sent by name, duplicates not counted twice.
type WebhookStats struct {
	Posts, Retries, Dropped                               int64
	Processed, Delivered, Bounce, SpamReport, Unsubscribe int64
}

type webhookSender struct {
	cfg   Webhooks
	hooks fakeprovider.Hooks
	seq   atomic.Int64
	kinds map[string]*atomic.Int64
}

// SendWebhooks makes s send Event Webhook batches per cfg for every mail
// it accepts from now on. Call it before the sends.
func (s *Server) SendWebhooks(cfg Webhooks) {
	h := &webhookSender{cfg: cfg, hooks: fakeprovider.Hooks{URL: cfg.URL, Retry: cfg.Retry, Attempts: cfg.Attempts, Client: cfg.Client},
		kinds: map[string]*atomic.Int64{}}
	for _, k := range []string{"processed", "delivered", "bounce", "spamreport", "unsubscribe"} {
		h.kinds[k] = new(atomic.Int64)
	}
	s.hooks.Install(h, &h.hooks)
}

// WaitWebhooks waits until every batch due so far was answered 2xx or
// given up, or ctx ends, and returns the counts.
func (s *Server) WaitWebhooks(ctx context.Context) (WebhookStats, error) {
	h, posts, retries, dropped, err := s.hooks.Wait(ctx)
	if h == nil {
		return WebhookStats{}, nil
	}
	return WebhookStats{Posts: posts, Retries: retries, Dropped: dropped, Processed: h.kinds["processed"].Load(),
		Delivered: h.kinds["delivered"].Load(), Bounce: h.kinds["bounce"].Load(), SpamReport: h.kinds["spamreport"].Load(),
		Unsubscribe: h.kinds["unsubscribe"].Load()}, err
}

// accepted schedules the batch of a mail to to, accepted as messageID.
func (h *webhookSender) accepted(to, id, campaign, messageID string, at time.Time) {
	kinds := []string{"processed", "delivered"}
	x := fakeprovider.Share(to)
	switch c := h.cfg; {
	case x < c.Bounce:
		kinds = []string{"processed", "bounce"}
	case x < c.Bounce+c.SpamReport:
		kinds = []string{"delivered", "spamreport"}
	case x < c.Bounce+c.SpamReport+c.Unsubscribe:
		kinds = []string{"delivered", "unsubscribe"}
	}
	events := make([]map[string]any, len(kinds))
	for i, k := range kinds {
		ev := map[string]any{"email": to, "timestamp": at.Unix() + int64(i), "event": k,
			"sg_event_id": fmt.Sprintf("ev-%s-%d", messageID, h.seq.Add(1)), "sg_message_id": messageID + ".filter0001"}
		if id != "" {
			ev["pacer_id"] = id
		}
		if campaign != "" {
			ev["pacer_campaign"] = campaign
		}
		if k == "bounce" {
			ev["status"], ev["reason"], ev["type"] = "5.1.1", "550 5.1.1 The email account that you tried to reach does not exist.", "bounce"
		}
		events[i] = ev
	}
	body, _ := json.Marshal(events)
	dup := h.hooks.Chance(h.cfg.Duplicate)
	h.hooks.Go(func() {
		time.Sleep(h.cfg.Delay)
		for range 1 + btoi(dup) {
			h.hooks.Post(body, func() http.Header { return h.sign(body) })
		}
		for _, k := range kinds {
			h.kinds[k].Add(1)
		}
	})
}

// sign returns the signature headers of body at the current second.
func (h *webhookSender) sign(body []byte) http.Header {
	ts := strconv.FormatInt(time.Now().Unix(), 10)
	sum := sha256.Sum256(append([]byte(ts), body...))
	der, _ := ecdsa.SignASN1(rand.Reader, h.cfg.Key, sum[:])
	return http.Header{"X-Twilio-Email-Event-Webhook-Signature": {base64.StdEncoding.EncodeToString(der)},
		"X-Twilio-Email-Event-Webhook-Timestamp": {ts}}
}

func btoi(b bool) int {
	if b {
		return 1
	}
	return 0
}
