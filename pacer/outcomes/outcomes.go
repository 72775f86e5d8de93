// Package outcomes is the outcomes topic: one record per final outcome of a
// tenant's message (delivered, failed, dead-lettered, suppressed), written
// by `pacer run` as it finishes the message and read by the callback
// dispatcher (package callback), which posts them to the tenant's
// callback URL.
//
// A [Writer] produces asynchronously: the pacing path never waits for
// Kafka. The consumer marks a source offset for commit only once every
// outcome written before it is acknowledged ([Writer.AfterAcked]), so a
// crash re-delivers the source record rather than lose its outcome; an
// outcome may then be written twice, and the dispatcher counts each
// (tenant, message id, outcome) once.
package outcomes

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/cenkalti/backoff/v5"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/twmb/franz-go/pkg/kgo"
)

// DefaultTopic is the outcomes topic unless PACER_CALLBACK_TOPIC names
// another.
const DefaultTopic = "pacer.outcomes"

// Outcome kinds, the values of [Record].Outcome.
const (
	// Delivered: the provider accepted the message.
	Delivered = "delivered"
	// Failed: the provider refused it for good (a permanent error, the
	// DLQ reason permanent:<code>); Code is the provider's code.
	Failed = "failed"
	// Suppressed: the recipient is suppressed (DLQ reason
	// suppressed:<reason>); Reason is the suppression's reason.
	Suppressed = "suppressed"
	// DeadLettered: written to the DLQ for another reason (Reason:
	// malformed, expired, cancelled, attempts-exhausted, unknown-outcome,
	// too-large).
	DeadLettered = "dead_lettered"
)

// Record is one outcome, the JSON value of one outcomes-topic record
// (its key is Tenant):
//
//	{"tenant":"acme","message_id":"c1-000001","campaign":"c1",
//	 "channel":"whatsapp","outcome":"failed","code":"131026",
//	 "at":"2026-12-07T16:00:00.123Z"}
type Record struct {
	Tenant    string    `json:"tenant"`
	MessageID string    `json:"message_id"` // the envelope id
	Campaign  string    `json:"campaign,omitempty"`
	Channel   string    `json:"channel"`
	Outcome   string    `json:"outcome"`          // Delivered, Failed, Suppressed or DeadLettered
	Reason    string    `json:"reason,omitempty"` // Suppressed, DeadLettered: why
	Code      string    `json:"code,omitempty"`   // Failed: the provider's code
	At        time.Time `json:"at"`               // when Pacer learnt it
}

// FromDeadLetter returns the outcome of a DLQ reason (the pacer-reason
// header): permanent:<code> is Failed with code, suppressed:<reason> is
// Suppressed with reason, anything else DeadLettered with the reason.
func FromDeadLetter(dlqReason string) (outcome, reason, code string) {
	if c, ok := strings.CutPrefix(dlqReason, "permanent:"); ok {
		return Failed, "", c
	}
	if r, ok := strings.CutPrefix(dlqReason, "suppressed:"); ok {
		return Suppressed, r, ""
	}
	return DeadLettered, dlqReason, ""
}

// Writer writes outcome records to the outcomes topic, asynchronously.
// Safe for concurrent use.
type Writer struct {
	cl     *kgo.Client
	topic  string
	log    *slog.Logger
	m      writerMetrics
	closed atomic.Bool // Close was called: failed writes are not retried

	mu      sync.Mutex
	next    uint64          // sequence of the next record written
	low     uint64          // every record below it is acknowledged
	acked   map[uint64]bool // acknowledged records at or above low
	waiters []waiter        // AfterAcked's, by rising upTo
}

type waiter struct {
	upTo uint64 // the records below it must be acknowledged
	fn   func()
}

type writerMetrics struct {
	written, failed prometheus.Counter
}

// NewWriter returns a Writer producing to topic through cl (a client
// whose buffer holds the outcomes of a Kafka outage: Write blocks only
// once kgo.MaxBufferedRecords wait). reg receives
// pacer_callback_outcomes_written_total and
// pacer_callback_outcome_write_errors_total (nil: none).
func NewWriter(cl *kgo.Client, topic string, log *slog.Logger, reg prometheus.Registerer) *Writer {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	w := &Writer{cl: cl, topic: topic, log: log, acked: map[uint64]bool{},
		m: writerMetrics{
			written: prometheus.NewCounter(prometheus.CounterOpts{Name: "pacer_callback_outcomes_written_total",
				Help: "Outcome records Kafka acknowledged on the outcomes topic."}),
			failed: prometheus.NewCounter(prometheus.CounterOpts{Name: "pacer_callback_outcome_write_errors_total",
				Help: "Failed writes of outcome records (each is written again until Kafka takes it)."}),
		}}
	if reg != nil {
		reg.MustRegister(w.m.written, w.m.failed)
	}
	return w
}

// Topic returns the topic w writes to.
func (w *Writer) Topic() string { return w.topic }

// Write produces r, keyed by its tenant, and returns at once. A failed
// write is written again (back-off up to 10 s) until Kafka takes it: an
// outcome is never dropped, and the offsets waiting on it
// ([Writer.AfterAcked]) wait that long.
func (w *Writer) Write(r Record) {
	v, err := json.Marshal(r)
	if err != nil { // a Record always marshals
		panic(fmt.Sprintf("outcomes: marshal: %v", err))
	}
	w.mu.Lock()
	seq := w.next
	w.next++
	w.mu.Unlock()
	b := backoff.NewExponentialBackOff()
	b.MaxInterval = 10 * time.Second
	w.produce(&kgo.Record{Topic: w.topic, Key: []byte(r.Tenant), Value: v}, seq, b)
}

func (w *Writer) produce(rec *kgo.Record, seq uint64, b *backoff.ExponentialBackOff) {
	// A fresh record per attempt: kgo keeps the first Produce's state.
	attempt := &kgo.Record{Topic: rec.Topic, Key: rec.Key, Value: rec.Value}
	w.cl.Produce(context.Background(), attempt, func(_ *kgo.Record, err error) {
		if err != nil && w.closed.Load() {
			return // the client is closing: the source records are read again
		}
		if err != nil {
			w.m.failed.Inc()
			d := b.NextBackOff()
			w.log.Warn("outcome record not written; writing it again", "topic", w.topic, "after", d, "err", err)
			time.AfterFunc(d, func() { w.produce(rec, seq, b) })
			return
		}
		w.m.written.Inc()
		w.ack(seq)
	})
}

// ack notes record seq acknowledged and calls the waiters it releases.
func (w *Writer) ack(seq uint64) {
	w.mu.Lock()
	w.acked[seq] = true
	for w.acked[w.low] {
		delete(w.acked, w.low)
		w.low++
	}
	n := 0
	for n < len(w.waiters) && w.waiters[n].upTo <= w.low {
		n++
	}
	ready := w.waiters[:n:n]
	w.waiters = w.waiters[n:]
	w.mu.Unlock()
	for _, wt := range ready {
		wt.fn()
	}
}

// AfterAcked calls fn once every record written before it is
// acknowledged by Kafka: at once (on the caller's goroutine) when none
// waits, else from the goroutine of the acknowledgement that releases it.
// Waiters are called in the order given.
func (w *Writer) AfterAcked(fn func()) {
	w.mu.Lock()
	if w.low == w.next {
		w.mu.Unlock()
		fn()
		return
	}
	w.waiters = append(w.waiters, waiter{upTo: w.next, fn: fn})
	w.mu.Unlock()
}

// Acked waits until every record written before it is acknowledged, or
// ctx ends (its error).
func (w *Writer) Acked(ctx context.Context) error {
	done := make(chan struct{})
	w.AfterAcked(func() { close(done) })
	select {
	case <-done:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// Close waits until the records written are acknowledged or ctx ends
// (its error), then stops retrying failed writes (their source records'
// offsets were not committed: they are read again). Call it before
// closing the client.
func (w *Writer) Close(ctx context.Context) error {
	err := w.Acked(ctx)
	w.closed.Store(true)
	return err
}

// Waiting returns how many records written are not yet acknowledged.
func (w *Writer) Waiting() int {
	w.mu.Lock()
	defer w.mu.Unlock()
	return int(w.next - w.low)
}
