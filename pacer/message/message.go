// Package message looks up one message by its envelope id: what the
// idempotency ledger holds of it (its state, provider message id and
// newest attempts, package ledger) and the events its provider's webhooks
// reported after the send (the outcome hash package control keeps for
// control.OutcomeTTL). `pacer message show` and the ingest API's
// GET /v1/messages/{id} answer with it.
package message

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/pacerhq/pacer/bucket"
	"github.com/pacerhq/pacer/pacer/ledger"
	"github.com/redis/go-redis/v9"
)

// Attempt is one request of the message to its provider.
type Attempt struct {
	At      time.Time `json:"at"`             // when its outcome was written (Redis TIME, ms)
	Outcome string    `json:"outcome"`        // delivered, retry, dead-lettered, requeued, unknown
	Code    string    `json:"code,omitempty"` // the provider's code or HTTP status; "no-answer"
}

// Event is one outcome a provider's webhook reported after the send.
type Event struct {
	Kind string     `json:"kind"`         // device_delivered, read, failed, bounced, suppressed
	At   *time.Time `json:"at,omitempty"` // when Pacer heard it; absent when not recorded
}

// Message is what Pacer holds of one envelope id.
type Message struct {
	ID      string `json:"id"`
	Channel string `json:"channel"`
	Key     string `json:"key"`
	// State: delivered, dead-lettered, claimed (a send under way, or left
	// by a process that stopped mid-send), retrying (its last attempt
	// failed and it waits for the next) or none (only events are known).
	State string `json:"state"`
	// ProviderMessageID is the provider's id of the accepted message
	// (delivered only; "" when the provider gave none).
	ProviderMessageID string `json:"provider_message_id,omitempty"`
	// Reason is why it was dead-lettered, when the ledger knows.
	Reason   string    `json:"reason,omitempty"`
	Attempts []Attempt `json:"attempts"` // the newest ledger.HistoryAttempts, oldest first
	Events   []Event   `json:"events"`   // in the order they were heard
	owner    string
}

// Owner is the process holding the claim of a claimed message ("" for
// another state); not part of the JSON a tenant sees.
func (m Message) Owner() string { return m.owner }

// Lookup reads id of channel under pacing key from led and the events
// of the outcome hash in rdb (keys names it): two round trips, writing
// nothing. found is false when neither holds anything of the id (never
// seen, or older than the ledger's TTL and the events' 8 days). Errors
// wrap the Redis error.
func Lookup(ctx context.Context, rdb redis.Cmdable, keys bucket.Keys, led *ledger.Ledger, channel, key, id string) (m Message, found bool, err error) {
	e, err := led.Show(ctx, channel, key, id)
	if err != nil {
		return Message{}, false, err
	}
	evs, err := rdb.HGetAll(ctx, keys.Outcomes(channel, id)).Result()
	if err != nil {
		return Message{}, false, fmt.Errorf("message: read the events of %s: %w", id, err)
	}
	if !e.Known() && len(evs) == 0 {
		return Message{}, false, nil
	}
	m = Message{ID: id, Channel: channel, Key: key, ProviderMessageID: e.ProviderID, Reason: e.Reason,
		Attempts: []Attempt{}, Events: []Event{}, owner: e.Owner}
	for _, a := range e.Attempts {
		m.Attempts = append(m.Attempts, Attempt{At: a.At.UTC(), Outcome: a.Outcome, Code: a.Code})
	}
	m.State = state(e)
	for kind, v := range evs {
		ev := Event{Kind: kind}
		if ms, err := strconv.ParseInt(v, 10, 64); err == nil && ms > 1 {
			at := time.UnixMilli(ms).UTC()
			ev.At = &at
		}
		m.Events = append(m.Events, ev)
	}
	slices.SortFunc(m.Events, func(a, b Event) int {
		switch {
		case a.At == nil && b.At == nil:
			return 0
		case a.At == nil:
			return -1
		case b.At == nil:
			return 1
		}
		return a.At.Compare(*b.At)
	})
	return m, true, nil
}

// state names e's state for a reader: the ledger's, and for an id it
// holds no claim or mark of, what its last attempt left (a permanent
// refusal or exhausted retries release the claim: dead-lettered; a
// transient one: retrying).
func state(e ledger.Entry) string {
	switch e.State {
	case ledger.StateDelivered:
		return "delivered"
	case ledger.StateDeadLettered:
		return "dead-lettered"
	case ledger.StateClaimed:
		return "claimed"
	}
	if n := len(e.Attempts); n > 0 {
		switch e.Attempts[n-1].Outcome {
		case "dead-lettered":
			return "dead-lettered"
		case "retry", "requeued", "unknown":
			return "retrying"
		}
	}
	return "none"
}

// Store looks messages up for the ingest API's tenants: a tenant sees
// only the ids it published ([Store.ForTenant]).
type Store struct {
	rdb  redis.Cmdable
	keys bucket.Keys
	led  *ledger.Ledger
}

// NewStore returns a Store over rdb whose ledger keeps ids ledgerTTL
// (PACER_LEDGER_TTL; 0 means ledger.DefaultTTL).
func NewStore(rdb redis.Cmdable, keys bucket.Keys, ledgerTTL time.Duration) *Store {
	return &Store{rdb: rdb, keys: keys, led: ledger.New(rdb, keys, ledgerTTL)}
}

// ForTenant looks up id of channel as [Lookup] does, when tenant
// published it through the ingest API: its id record (bucket.Keys.Ingest
// "id", "<tenant>:<channel>:<id>", kept PACER_IDEMPOTENCY_TTL) names the
// pacing key ("d:<pacing key>"). found is false for an id the tenant did
// not publish (another tenant's, or one published before its records
// named the pacing key) and for one neither the ledger nor the events
// hold. Three round trips; errors wrap the Redis error.
func (s *Store) ForTenant(ctx context.Context, tenant, channel, id string) (m Message, found bool, err error) {
	v, err := s.rdb.Get(ctx, s.keys.Ingest("id", tenant+":"+channel+":"+id)).Result()
	if errors.Is(err, redis.Nil) {
		return Message{}, false, nil
	}
	if err != nil {
		return Message{}, false, fmt.Errorf("message: read the id record of %s: %w", id, err)
	}
	key, ok := strings.CutPrefix(v, "d:")
	if !ok || key == "" {
		return Message{}, false, nil
	}
	return Lookup(ctx, s.rdb, s.keys, s.led, channel, key, id)
}
