// Package callback is the callback dispatcher (run by `pacer ingest`): it
// reads the outcomes topic (package outcomes, written by `pacer run`),
// and POSTs each tenant's outcomes, in batches, to the tenant's
// callback_url, signed with the Standard Webhooks scheme
// (github.com/standard-webhooks/standard-webhooks, spec/standard-webhooks.md:
// webhook-id, webhook-timestamp, webhook-signature "v1,<base64
// HMAC-SHA256(secret, id.timestamp.body)>", one per secret).
//
// # Delivery
//
//   - Per tenant: each tenant has its own queue and its own sender; a
//     receiver that is down holds back only its tenant's batches (the
//     others are sent meanwhile). Its outcomes wait in memory, up to
//     [Config.MaxPending]; past that the partitions they came from pause
//     (other tenants on those partitions wait too: memory is bounded).
//   - A batch holds up to [Config.Batch] outcomes, sent once it is full or
//     its oldest outcome waited [Config.Wait]. It keeps its webhook-id
//     and its body through every retry (exponential back-off with jitter
//     from [Config.FirstBackoff] to [Config.MaxBackoff]); only the
//     webhook-timestamp and so the signature change. Any 2xx answer
//     acknowledges it; anything else (another status, a timeout, a
//     refused connection) is a failed attempt.
//   - Offsets are committed only past outcomes their receiver
//     acknowledged (or that need no callback: a tenant without
//     callback_url, a record that is not an outcome), so a crash sends
//     again and never skips.
//   - Once: an outcome is sent once per (tenant, message id, outcome).
//     Copies read while one is queued or in flight join it; after a 2xx
//     each outcome's key is set in Redis for [Config.DedupeTTL], and an
//     outcome whose key is set is dropped before it enters a batch (a
//     replayed topic, a source record re-delivered to `pacer run`). A
//     dispatcher that dies between a receiver's 2xx and those keys, or a
//     partition moved while its batch was in flight, can send an outcome
//     again in a batch of another webhook-id: receivers dedupe by
//     webhook-id, and by (message_id, outcome) to be safe.
//
// # Metrics
//
// No label names a tenant; the log names the tenant of a failed attempt.
//
//	pacer_callback_batches_sent_total        batches a receiver acknowledged (2xx)
//	pacer_callback_outcomes_sent_total       outcomes in them
//	pacer_callback_attempts_failed_total     POSTs not answered 2xx (retried)
//	pacer_callback_duplicates_total          outcomes dropped as sent before
//	pacer_callback_outcomes_pending          outcomes read and not yet acknowledged
//	pacer_callback_oldest_pending_seconds    age of the oldest of them, from its outcome's time
package callback

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/url"
	"os"
	"strings"
	"sync"
	"time"

	"github.com/cenkalti/backoff/v5"
	"github.com/google/uuid"
	"github.com/pacerhq/pacer/internal/tick"
	"github.com/pacerhq/pacer/pacer/outcomes"
	"github.com/pacerhq/pacer/pacer/produce"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"
	standardwebhooks "github.com/standard-webhooks/standard-webhooks/libraries/go"
	"github.com/twmb/franz-go/pkg/kgo"
)

// Receiver is a tenant's callback: where its outcomes go and the file of
// the secrets that sign them.
type Receiver struct {
	URL        string
	SecretFile string // whsec_<base64> secrets, whitespace-separated
}

// Config configures a [Dispatcher]; zero values mean the defaults.
type Config struct {
	Topic        string        // the outcomes topic; default outcomes.DefaultTopic
	Group        string        // consumer group; default "pacer-callbacks"
	Partitions   int           // of the outcomes topic when it has to be created; default 12
	Batch        int           // most outcomes per POST; default 100
	Wait         time.Duration // longest an outcome waits for its batch to fill; default 1s
	Timeout      time.Duration // one POST, answer included; default 10s
	FirstBackoff time.Duration // wait after a batch's first failed attempt; default 1s
	MaxBackoff   time.Duration // longest wait between attempts; default 5m
	DedupeTTL    time.Duration // how long an outcome sent is remembered; default 168h
	MaxPending   int           // outcomes of one tenant held in memory before their partitions pause; default 10000
	KeyPrefix    string        // Redis key prefix; default "pacer:"
	Logger       *slog.Logger
	HTTPClient   *http.Client // default: one with Timeout, redirects not followed
}

func (c *Config) defaults() {
	def := func(v *time.Duration, d time.Duration) {
		if *v <= 0 {
			*v = d
		}
	}
	if c.Topic == "" {
		c.Topic = outcomes.DefaultTopic
	}
	if c.Group == "" {
		c.Group = "pacer-callbacks"
	}
	if c.Partitions <= 0 {
		c.Partitions = 12
	}
	if c.Batch <= 0 {
		c.Batch = 100
	}
	if c.MaxPending <= 0 {
		c.MaxPending = 10000
	}
	if c.KeyPrefix == "" {
		c.KeyPrefix = "pacer:"
	}
	def(&c.Wait, time.Second)
	def(&c.Timeout, 10*time.Second)
	def(&c.FirstBackoff, time.Second)
	def(&c.MaxBackoff, 5*time.Minute)
	def(&c.DedupeTTL, 7*24*time.Hour)
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	if c.HTTPClient == nil {
		c.HTTPClient = &http.Client{Timeout: c.Timeout,
			CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	}
}

// Body is what a callback POST carries (Content-Type application/json):
//
//	{"type":"message.outcomes","timestamp":"2026-12-07T16:00:01Z",
//	 "data":{"tenant":"acme","outcomes":[{"tenant":"acme",
//	   "message_id":"c1-000001","campaign":"c1","channel":"whatsapp",
//	   "outcome":"delivered","at":"2026-12-07T16:00:00.123Z"}]}}
type Body struct {
	Type      string    `json:"type"` // always "message.outcomes"
	Timestamp time.Time `json:"timestamp"`
	Data      BodyData  `json:"data"`
}

// BodyData is a Body's data: the tenant and its outcomes.
type BodyData struct {
	Tenant   string            `json:"tenant"`
	Outcomes []outcomes.Record `json:"outcomes"`
}

// Dispatcher reads the outcomes topic and calls the tenants back.
type Dispatcher struct {
	cfg       Config
	rdb       redis.Cmdable
	receivers func(tenant string) (Receiver, bool)
	log       *slog.Logger
	m         *metrics

	mu      sync.Mutex
	cl      *kgo.Client
	parts   map[tp]*partLog
	tenants map[string]*tenantQ
	paused  map[tp]bool
	ctx     context.Context
	wg      sync.WaitGroup
}

type tp struct {
	topic     string
	partition int32
}

// partLog is one partition's records in offset order, until the head of
// the done ones is marked for commit.
type partLog struct {
	tp   tp
	log  []*entry
	gone bool // revoked or lost: its entries no longer count
}

type entry struct {
	part   *partLog
	offset int64
	epoch  int32
	done   bool
}

// item is one outcome to send and the records that carried it.
type item struct {
	rec     outcomes.Record
	key     string // its dedupe key in Redis
	entries []*entry
	queued  bool // in its tenant's queue (not yet in a batch)
}

type tenantQ struct {
	id    string
	queue []*item
	items map[string]*item // queued or in a batch, by key
	parts map[tp]int       // items by partition
	wake  chan struct{}
}

// New returns a Dispatcher that checks and marks outcomes sent in rdb and
// finds each tenant's receiver with receivers (false: the tenant has no
// callback, its outcomes are passed over). reg receives the metrics of
// the package doc.
func New(cfg Config, rdb redis.Cmdable, receivers func(tenant string) (Receiver, bool), reg prometheus.Registerer) (*Dispatcher, error) {
	cfg.defaults()
	m, err := newMetrics(reg)
	if err != nil {
		return nil, fmt.Errorf("callback: metrics: %w", err)
	}
	return &Dispatcher{cfg: cfg, rdb: rdb, receivers: receivers, log: cfg.Logger, m: m,
		parts: map[tp]*partLog{}, tenants: map[string]*tenantQ{}, paused: map[tp]bool{}}, nil
}

// Run consumes the outcomes topic until ctx ends, with the connection
// settings of kopts, then commits what receivers acknowledged and
// returns nil, or the error that stopped it.
func (d *Dispatcher) Run(ctx context.Context, kopts []kgo.Opt) error {
	admin, err := kgo.NewClient(kopts...)
	if err != nil {
		return fmt.Errorf("callback: kafka client: %w", err)
	}
	// Kafka down at start-up: tried again (1 s doubling to 30 s) until it
	// answers, while the gateway serves.
	wait := &backoff.ExponentialBackOff{InitialInterval: time.Second, RandomizationFactor: 0.2, Multiplier: 2, MaxInterval: 30 * time.Second}
	wait.Reset()
	for {
		_, err = produce.EnsureTopic(ctx, admin, d.cfg.Topic, d.cfg.Partitions)
		if err == nil || ctx.Err() != nil {
			break
		}
		d.log.Warn("outcomes topic not checked; trying again", "topic", d.cfg.Topic, "err", err)
		if !tick.Sleep(ctx, wait.NextBackOff()) {
			break
		}
	}
	admin.Close()
	if ctx.Err() != nil {
		return nil
	}
	cl, err := kgo.NewClient(append(append([]kgo.Opt{}, kopts...),
		kgo.ConsumerGroup(d.cfg.Group), kgo.ConsumeTopics(d.cfg.Topic),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()),
		kgo.AutoCommitMarks(), kgo.AutoCommitInterval(time.Second),
		kgo.BlockRebalanceOnPoll(),
		kgo.OnPartitionsRevoked(d.revoked), kgo.OnPartitionsLost(d.lost))...)
	if err != nil {
		return fmt.Errorf("callback: kafka client: %w", err)
	}
	sendCtx, cancel := context.WithCancel(ctx)
	d.mu.Lock()
	d.cl, d.ctx = cl, sendCtx
	d.mu.Unlock()
	d.log.Info("callback dispatcher started", "topic", d.cfg.Topic, "group", d.cfg.Group)
	go d.gaugeLoop(sendCtx)
	for {
		fs := cl.PollRecords(ctx, 1000)
		if fs.IsClientClosed() || ctx.Err() != nil {
			cl.AllowRebalance()
			break
		}
		fs.EachError(func(t string, p int32, err error) {
			d.log.Warn("outcomes topic fetch failed", "topic", t, "partition", p, "err", err)
		})
		d.mu.Lock()
		fs.EachRecord(d.take)
		d.pauseOver()
		d.mu.Unlock()
		cl.AllowRebalance()
	}
	cancel()
	d.wg.Wait()
	cctx, ccancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
	defer ccancel()
	if err := cl.CommitMarkedOffsets(cctx); err != nil {
		d.log.Warn("final commit of the outcomes topic failed; acknowledged outcomes will be read again (and dropped as sent)", "err", err)
	}
	cl.Close()
	d.log.Info("callback dispatcher stopped")
	return nil
}

// take routes record r to its tenant's queue. Callers hold d.mu.
func (d *Dispatcher) take(r *kgo.Record) {
	k := tp{r.Topic, r.Partition}
	pl := d.parts[k]
	if pl == nil {
		pl = &partLog{tp: k}
		d.parts[k] = pl
	}
	e := &entry{part: pl, offset: r.Offset, epoch: r.LeaderEpoch}
	pl.log = append(pl.log, e)
	var rec outcomes.Record
	if err := json.Unmarshal(r.Value, &rec); err != nil || rec.Tenant == "" || rec.MessageID == "" || rec.Outcome == "" {
		d.log.Warn("outcomes topic record is not an outcome; skipped", "topic", r.Topic, "partition", r.Partition, "offset", r.Offset)
		d.done(e)
		return
	}
	if _, ok := d.receivers(rec.Tenant); !ok {
		d.done(e) // no callback for this tenant
		return
	}
	t := d.tenant(rec.Tenant)
	key := d.cfg.KeyPrefix + "callback:sent:{" + rec.Tenant + "}:" + rec.Outcome + ":" + rec.MessageID
	if it := t.items[key]; it != nil {
		it.entries = append(it.entries, e) // done when it is
		return
	}
	it := &item{rec: rec, key: key, entries: []*entry{e}, queued: true}
	t.items[key] = it
	t.parts[k]++
	t.queue = append(t.queue, it)
	select {
	case t.wake <- struct{}{}:
	default:
	}
}

// tenant returns id's queue, starting its sender. Callers hold d.mu.
func (d *Dispatcher) tenant(id string) *tenantQ {
	t := d.tenants[id]
	if t == nil {
		t = &tenantQ{id: id, items: map[string]*item{}, parts: map[tp]int{}, wake: make(chan struct{}, 1)}
		d.tenants[id] = t
		d.wg.Add(1)
		go d.send(d.ctx, t)
	}
	return t
}

// done marks e done and marks for commit the head of done records of its
// partition. Callers hold d.mu.
func (d *Dispatcher) done(e *entry) {
	e.done = true
	pl := e.part
	if pl.gone {
		return
	}
	n := 0
	for n < len(pl.log) && pl.log[n].done {
		n++
	}
	if n == 0 {
		return
	}
	last := pl.log[n-1]
	pl.log = pl.log[n:]
	d.cl.MarkCommitRecords(&kgo.Record{Topic: pl.tp.topic, Partition: pl.tp.partition, Offset: last.offset, LeaderEpoch: last.epoch})
}

// finished ends items: their records are done. Callers hold d.mu.
func (d *Dispatcher) finished(t *tenantQ, its []*item) {
	for _, it := range its {
		delete(t.items, it.key)
		for _, e := range it.entries {
			if t.parts[e.part.tp]--; t.parts[e.part.tp] <= 0 {
				delete(t.parts, e.part.tp)
			}
			d.done(e)
		}
	}
	d.pauseOver()
}

// pauseOver pauses the partitions of the tenants holding MaxPending
// outcomes or more, and resumes the others. Callers hold d.mu.
func (d *Dispatcher) pauseOver() {
	want := map[tp]bool{}
	for _, t := range d.tenants {
		if len(t.items) >= d.cfg.MaxPending {
			for k := range t.parts {
				want[k] = true
			}
		}
	}
	pause, resume := map[string][]int32{}, map[string][]int32{}
	for k := range want {
		if !d.paused[k] {
			pause[k.topic] = append(pause[k.topic], k.partition)
		}
	}
	for k := range d.paused {
		if !want[k] {
			resume[k.topic] = append(resume[k.topic], k.partition)
		}
	}
	if len(pause) > 0 {
		d.cl.PauseFetchPartitions(pause)
		d.log.Warn("outcomes partitions paused: a tenant holds the most outcomes waiting for its receiver", "partitions", fmt.Sprint(pause), "max_pending", d.cfg.MaxPending)
	}
	if len(resume) > 0 {
		d.cl.ResumeFetchPartitions(resume)
	}
	d.paused = want
}

func (d *Dispatcher) revoked(ctx context.Context, cl *kgo.Client, parts map[string][]int32) {
	d.drop(parts)
	if err := cl.CommitMarkedOffsets(ctx); err != nil {
		d.log.Warn("commit on revoke failed; acknowledged outcomes will be read again (and dropped as sent)", "err", err)
	}
}

func (d *Dispatcher) lost(_ context.Context, _ *kgo.Client, parts map[string][]int32) { d.drop(parts) }

// drop forgets the partitions of parts: their queued outcomes are left
// to the partitions' next owner (batches in flight go on).
func (d *Dispatcher) drop(parts map[string][]int32) {
	d.mu.Lock()
	defer d.mu.Unlock()
	for topic, ps := range parts {
		for _, p := range ps {
			k := tp{topic, p}
			if pl := d.parts[k]; pl != nil {
				pl.gone = true
				delete(d.parts, k)
			}
			delete(d.paused, k)
		}
	}
	for _, t := range d.tenants {
		kept := t.queue[:0]
		for _, it := range t.queue {
			if it.entries[0].part.gone {
				delete(t.items, it.key)
				for _, e := range it.entries {
					if t.parts[e.part.tp]--; t.parts[e.part.tp] <= 0 {
						delete(t.parts, e.part.tp)
					}
				}
				continue
			}
			kept = append(kept, it)
		}
		clear(t.queue[len(kept):])
		t.queue = kept
	}
}

// send is tenant t's sender: it makes batches of t's queue and posts each
// until its receiver acknowledges it, until ctx ends.
func (d *Dispatcher) send(ctx context.Context, t *tenantQ) {
	defer d.wg.Done()
	for {
		batch, ok := d.nextBatch(ctx, t)
		if !ok {
			return
		}
		batch = d.unsent(ctx, t, batch)
		if len(batch) == 0 {
			continue
		}
		if !d.post(ctx, t.id, batch) {
			return
		}
		d.markSent(ctx, batch)
		d.m.batches.Inc()
		d.m.sent.Add(float64(len(batch)))
		d.mu.Lock()
		d.finished(t, batch)
		d.mu.Unlock()
	}
}

// nextBatch waits until t's queue holds a full batch or its oldest
// outcome waited Wait, and takes up to Batch outcomes; false once ctx
// ended.
func (d *Dispatcher) nextBatch(ctx context.Context, t *tenantQ) ([]*item, bool) {
	var first time.Time
	for {
		d.mu.Lock()
		n := len(t.queue)
		d.mu.Unlock()
		now := time.Now()
		switch {
		case n == 0:
			first = time.Time{}
		case first.IsZero():
			first = now
		}
		if n >= d.cfg.Batch || (n > 0 && now.Sub(first) >= d.cfg.Wait) {
			d.mu.Lock()
			n = min(len(t.queue), d.cfg.Batch)
			batch := append([]*item(nil), t.queue[:n]...)
			clear(t.queue[:n])
			t.queue = t.queue[n:]
			for _, it := range batch {
				it.queued = false
			}
			d.mu.Unlock()
			if len(batch) > 0 {
				return batch, true
			}
			continue
		}
		var timer <-chan time.Time
		var tm *time.Timer
		if n > 0 {
			tm = time.NewTimer(d.cfg.Wait - now.Sub(first))
			timer = tm.C
		}
		select {
		case <-ctx.Done():
			return nil, false
		case <-t.wake:
		case <-timer:
		}
		if tm != nil {
			tm.Stop()
		}
	}
}

// unsent returns the outcomes of batch not sent before (their Redis keys
// unset); those sent are finished as duplicates. Redis not answering is
// retried every second: nothing is sent unchecked.
func (d *Dispatcher) unsent(ctx context.Context, t *tenantQ, batch []*item) []*item {
	for {
		cmds := make([]*redis.IntCmd, len(batch))
		_, err := d.rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
			for i, it := range batch {
				cmds[i] = p.Exists(ctx, it.key)
			}
			return nil
		})
		if err == nil {
			var keep, dups []*item
			for i, it := range batch {
				if cmds[i].Val() > 0 {
					dups = append(dups, it)
				} else {
					keep = append(keep, it)
				}
			}
			if len(dups) > 0 {
				d.m.duplicates.Add(float64(len(dups)))
				d.mu.Lock()
				d.finished(t, dups)
				d.mu.Unlock()
			}
			return keep
		}
		if ctx.Err() != nil {
			return nil
		}
		d.log.Warn("redis: outcomes sent before not checked; trying again in 1s", "tenant", t.id, "err", err)
		if !tick.Sleep(ctx, time.Second) {
			return nil
		}
	}
}

// markSent sets the Redis key of each outcome of batch for DedupeTTL,
// again every second until Redis takes them (or ctx ends).
func (d *Dispatcher) markSent(ctx context.Context, batch []*item) {
	for {
		_, err := d.rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
			for _, it := range batch {
				p.SetNX(ctx, it.key, "1", d.cfg.DedupeTTL)
			}
			return nil
		})
		if err == nil || ctx.Err() != nil {
			return
		}
		d.log.Warn("redis: outcomes sent not marked; trying again in 1s", "err", err)
		if !tick.Sleep(ctx, time.Second) {
			return
		}
	}
}

// post sends batch to tenant's receiver until it answers 2xx (true), or
// ctx ends (false). Every attempt carries the same webhook-id and body.
func (d *Dispatcher) post(ctx context.Context, tenant string, batch []*item) bool {
	recs := make([]outcomes.Record, len(batch))
	for i, it := range batch {
		recs[i] = it.rec
	}
	body, err := json.Marshal(Body{Type: "message.outcomes", Timestamp: time.Now().UTC().Truncate(time.Second),
		Data: BodyData{Tenant: tenant, Outcomes: recs}})
	if err != nil {
		panic(fmt.Sprintf("callback: marshal: %v", err))
	}
	id := "msg_" + strings.ReplaceAll(uuid.NewString(), "-", "")
	b := newBackoff(d.cfg.FirstBackoff, d.cfg.MaxBackoff)
	for attempt := 1; ; attempt++ {
		rcv, ok := d.receivers(tenant)
		if !ok {
			d.log.Warn("tenant has no callback any more: its outcomes are dropped", "tenant", tenant, "outcomes", len(batch))
			return true
		}
		err := d.attempt(ctx, rcv, id, body)
		if err == nil {
			return true
		}
		if ctx.Err() != nil {
			return false
		}
		d.m.failed.Inc()
		wait := b.next()
		d.log.Warn("callback not acknowledged; sending the batch again", "tenant", tenant, "url", redacted(rcv.URL),
			"webhook_id", id, "outcomes", len(batch), "attempt", attempt, "after", wait.Round(time.Millisecond), "err", err)
		if !tick.Sleep(ctx, wait) {
			return false
		}
	}
}

// cappedBackoff is an exponential back-off with ±20% jitter whose waits
// never exceed its max, jitter included: MaxBackoff is the longest wait.
type cappedBackoff struct {
	b   *backoff.ExponentialBackOff
	max time.Duration
}

// newBackoff returns the back-off of a batch's retries: first, then
// doubling, each ±20%, never more than max.
func newBackoff(first, max time.Duration) *cappedBackoff {
	b := &backoff.ExponentialBackOff{InitialInterval: first, RandomizationFactor: 0.2, Multiplier: 2, MaxInterval: max}
	b.Reset()
	return &cappedBackoff{b: b, max: max}
}

// next returns the wait before the next attempt, at most max.
func (c *cappedBackoff) next() time.Duration {
	return min(c.b.NextBackOff(), c.max)
}

// redacted returns a callback_url fit for logs: its password, if any,
// replaced by xxxxx (url.URL.Redacted); a URL that does not parse is not
// shown at all.
func redacted(raw string) string {
	u, err := url.Parse(raw)
	if err != nil {
		return "(callback_url does not parse)"
	}
	return u.Redacted()
}

// attempt POSTs body once, signed with every secret of rcv's file.
func (d *Dispatcher) attempt(ctx context.Context, rcv Receiver, id string, body []byte) error {
	keys, err := ReadSecrets(rcv.SecretFile)
	if err != nil {
		return err
	}
	ts := time.Now()
	sigs := make([]string, 0, len(keys))
	for _, k := range keys {
		wh, err := standardwebhooks.NewWebhookRaw(k)
		if err != nil {
			return fmt.Errorf("callback secret file %s: %w", rcv.SecretFile, err)
		}
		sig, err := wh.Sign(id, ts, body)
		if err != nil {
			return fmt.Errorf("callback: sign: %w", err)
		}
		sigs = append(sigs, sig)
	}
	rctx, cancel := context.WithTimeout(ctx, d.cfg.Timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(rctx, http.MethodPost, rcv.URL, bytes.NewReader(body))
	if err != nil {
		// The parse error quotes the URL, password and all: name only the
		// field.
		return errors.New("callback_url: not a valid URL")
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set(standardwebhooks.HeaderWebhookID, id)
	req.Header.Set(standardwebhooks.HeaderWebhookTimestamp, fmt.Sprint(ts.Unix()))
	req.Header.Set(standardwebhooks.HeaderWebhookSignature, strings.Join(sigs, " "))
	resp, err := d.cfg.HTTPClient.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 64<<10))
	if resp.StatusCode < 200 || resp.StatusCode > 299 {
		return fmt.Errorf("receiver answered %s", resp.Status)
	}
	return nil
}

// ReadSecrets reads a callback secret file: whsec_<base64> secrets
// (24 to 64 bytes once decoded), whitespace-separated, each signing every
// callback (several while a secret is rotated). Errors name the file and
// the secret's position, never a secret.
func ReadSecrets(path string) ([][]byte, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("callback secret file: %w", err)
	}
	fields := strings.Fields(string(b))
	if len(fields) == 0 {
		return nil, fmt.Errorf("callback secret file %s: no secret", path)
	}
	keys := make([][]byte, len(fields))
	for i, f := range fields {
		b64, ok := strings.CutPrefix(f, "whsec_")
		key, err := base64.StdEncoding.DecodeString(b64)
		switch {
		case !ok || err != nil:
			return nil, fmt.Errorf("callback secret file %s: secret %d of %d: not whsec_ followed by base64", path, i+1, len(fields))
		case len(key) < 24 || len(key) > 64:
			return nil, fmt.Errorf("callback secret file %s: secret %d of %d: %d bytes once decoded, want 24 to 64", path, i+1, len(fields), len(key))
		}
		keys[i] = key
	}
	return keys, nil
}

// gaugeLoop sets the pending gauges every second until ctx ends.
func (d *Dispatcher) gaugeLoop(ctx context.Context) {
	t := time.NewTicker(time.Second)
	defer t.Stop()
	for {
		d.mu.Lock()
		now := time.Now()
		oldest, pending := now, 0
		for _, q := range d.tenants {
			pending += len(q.items)
			for _, it := range q.items {
				if it.rec.At.Before(oldest) {
					oldest = it.rec.At
				}
			}
		}
		d.mu.Unlock()
		d.m.pending.Set(float64(pending))
		d.m.oldest.Set(now.Sub(oldest).Seconds())
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// metrics carry no tenant label (no Pacer metric names a tenant): the
// log names the tenant of each failed attempt.
type metrics struct {
	batches, sent, failed, duplicates prometheus.Counter
	pending, oldest                   prometheus.Gauge
}

func newMetrics(reg prometheus.Registerer) (*metrics, error) {
	c := func(name, help string) prometheus.Counter {
		return prometheus.NewCounter(prometheus.CounterOpts{Name: name, Help: help})
	}
	g := func(name, help string) prometheus.Gauge {
		return prometheus.NewGauge(prometheus.GaugeOpts{Name: name, Help: help})
	}
	m := &metrics{
		batches:    c("pacer_callback_batches_sent_total", "Callback batches a tenant's receiver acknowledged (2xx)."),
		sent:       c("pacer_callback_outcomes_sent_total", "Outcomes in callback batches acknowledged."),
		failed:     c("pacer_callback_attempts_failed_total", "Callback POSTs not answered 2xx (the batch is sent again after a back-off)."),
		duplicates: c("pacer_callback_duplicates_total", "Outcomes dropped before their batch: sent before (same tenant, message id and outcome)."),
		pending:    g("pacer_callback_outcomes_pending", "Outcomes read from the outcomes topic and not yet acknowledged by their receiver."),
		oldest:     g("pacer_callback_oldest_pending_seconds", "Age of the oldest outcome pending over every tenant, from its outcome's time (0: none)."),
	}
	if reg != nil {
		for _, col := range []prometheus.Collector{m.batches, m.sent, m.failed, m.duplicates, m.pending, m.oldest} {
			if err := reg.Register(col); err != nil {
				return nil, err
			}
		}
	}
	return m, nil
}
