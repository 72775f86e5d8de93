// Package pacer is the consume-pace-send loop: it reads envelopes from a
// channel's Kafka topic as one consumer-group member, takes a token from the
// Redis token bucket of each envelope's pacing key, sends through the
// channel's [channels.Sender], and commits a partition's offset only past
// records that are finished (delivered or dead-lettered).
//
// # Per record
//
//   - malformed (not an envelope) or expired: written to the DLQ topic with a
//     reason header, never sent.
//   - success: counted as delivered.
//   - throttle: the pacing key gets a cooldown in Redis (the provider's
//     Retry-After, else [Config.ThrottleCooldown], doubling while throttles
//     repeat), shared by every replica; the record is retried after it and
//     the throttle does not count as a failed attempt.
//   - transient: retried with exponential back-off and jitter; after
//     [Config.MaxAttempts] requests it goes to the DLQ (attempts-exhausted).
//   - permanent: DLQ with reason permanent:<provider code>.
//   - halt (credentials, account blocked): the key cools down for
//     [Config.HaltCooldown] and the record is retried; nothing is dropped.
//
// One goroutine per assigned partition handles its records in offset order,
// so the commit point is always just past the last finished record. A crash
// re-delivers, never skips.
//
// # Metrics
//
// All carry the label channel.
//
//	pacer_sends_total{class}            requests sent, by response class
//	pacer_delivered_total               messages the provider accepted
//	pacer_dlq_total{reason}             records dead-lettered, by reason
//	pacer_bucket_wait_seconds           histogram: token wait per message
//	pacer_take_duration_seconds         histogram: one bucket call to Redis
//	pacer_send_duration_seconds         histogram: one provider request
//	pacer_redis_errors_total            failed bucket calls (the record waits)
//	pacer_partitions_assigned           partitions owned by this process
//	pacer_records_queued                fetched records not yet finished
//	pacer_ready                         1 when consuming and Redis answers
package pacer

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/cenkalti/backoff/v5"
	"github.com/pacerhq/pacer/bucket"
	"github.com/pacerhq/pacer/channels"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/twmb/franz-go/pkg/kgo"
)

// Bucket is the distributed token bucket the pacer draws from;
// *bucket.Limiter implements it. Both methods are safe for concurrent use.
type Bucket interface {
	// Take removes cost tokens from the bucket of (channel, key) or says how
	// long to wait; see bucket.Limiter.Take.
	Take(ctx context.Context, channel, key string, lim bucket.Limit, cost int) (bucket.Decision, error)
	// Cooldown stops every replica from taking tokens for (channel, key) for
	// at least d.
	Cooldown(ctx context.Context, channel, key string, d time.Duration) error
}

// Config configures a [Pacer]. Zero values mean the documented default;
// Channel and Limit are required.
type Config struct {
	Channel          string        // channel name, e.g. "whatsapp"; required
	Topic            string        // topic to consume; default "pacer.<Channel>"
	Group            string        // consumer group; default "pacer-<Channel>"
	DLQTopic         string        // dead-letter topic; default "<Topic>.dlq"
	Limit            bucket.Limit  // rate and burst per pacing key; required
	MaxAttempts      int           // requests per record before DLQ on transient failures; default 5
	Drain            time.Duration // on shutdown or revoke, how long in-flight sends may finish; default 30s
	SendTimeout      time.Duration // one provider request; default 30s
	ThrottleCooldown time.Duration // key cooldown after a throttle without Retry-After; default 1s
	MaxCooldown      time.Duration // cap for any cooldown or retry delay; default 1h
	HaltCooldown     time.Duration // key cooldown after a halt response; default 30s
	MaxQueued        int           // fetched records per partition before fetching pauses; default 2000
	Logger           *slog.Logger  // default slog.Default()
}

func (c *Config) setDefaults() error {
	if c.Channel == "" {
		return errors.New("pacer: config: Channel is required")
	}
	if err := c.Limit.Validate(); err != nil {
		return fmt.Errorf("pacer: config: %w", err)
	}
	def := func(s *string, v string) {
		if *s == "" {
			*s = v
		}
	}
	def(&c.Topic, "pacer."+c.Channel)
	def(&c.Group, "pacer-"+c.Channel)
	def(&c.DLQTopic, c.Topic+".dlq")
	defd := func(d *time.Duration, v time.Duration) {
		if *d <= 0 {
			*d = v
		}
	}
	defd(&c.Drain, 30*time.Second)
	defd(&c.SendTimeout, 30*time.Second)
	defd(&c.ThrottleCooldown, time.Second)
	defd(&c.MaxCooldown, time.Hour)
	defd(&c.HaltCooldown, 30*time.Second)
	if c.MaxAttempts <= 0 {
		c.MaxAttempts = 5
	}
	if c.MaxQueued <= 0 {
		c.MaxQueued = 2000
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	return nil
}

// Pacer consumes one channel's topic and paces its sends. Create it with
// [New] and call [Pacer.Run] once.
type Pacer struct {
	cfg    Config
	kopts  []kgo.Opt
	bucket Bucket
	sender channels.Sender
	m      *metrics
	log    *slog.Logger

	consuming atomic.Bool
	redisOK   atomic.Bool

	mu      sync.Mutex
	workers map[tp]*worker
	cl      *kgo.Client
	// sendCtx ends when the drain deadline passes after shutdown began.
	sendCtx context.Context
}

type tp struct {
	topic     string
	partition int32
}

// New returns a Pacer for cfg. kopts carry the connection settings (at least
// kgo.SeedBrokers); New adds the consumer group, topic and commit options.
// reg receives the metrics listed in the package doc. New returns an error
// naming the field when cfg is invalid, or the registration error.
func New(cfg Config, kopts []kgo.Opt, b Bucket, s channels.Sender, reg prometheus.Registerer) (*Pacer, error) {
	if err := cfg.setDefaults(); err != nil {
		return nil, err
	}
	if b == nil || s == nil {
		return nil, errors.New("pacer: New needs a Bucket and a Sender")
	}
	m, err := newMetrics(prometheus.WrapRegistererWith(prometheus.Labels{"channel": cfg.Channel}, reg))
	if err != nil {
		return nil, fmt.Errorf("pacer: metrics: %w", err)
	}
	p := &Pacer{cfg: cfg, kopts: kopts, bucket: b, sender: s, m: m, log: cfg.Logger.With("channel", cfg.Channel),
		workers: map[tp]*worker{}}
	p.redisOK.Store(true)
	return p, nil
}

// Ready reports whether the pacer is consuming and its last bucket call
// reached Redis. It backs /readyz.
func (p *Pacer) Ready() bool {
	ok := p.consuming.Load() && p.redisOK.Load()
	return ok
}

// Run consumes until ctx ends, then stops fetching, lets in-flight sends
// finish within Config.Drain, commits finished offsets and leaves the group.
// It returns nil after a clean shutdown, or the error that stopped it.
func (p *Pacer) Run(ctx context.Context) error {
	sendCtx, cancelSends := context.WithCancel(context.WithoutCancel(ctx))
	defer cancelSends()
	p.sendCtx = sendCtx

	opts := append([]kgo.Opt{}, p.kopts...)
	opts = append(opts,
		kgo.ConsumerGroup(p.cfg.Group),
		kgo.ConsumeTopics(p.cfg.Topic),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()),
		kgo.AutoCommitMarks(),
		kgo.AutoCommitInterval(time.Second),
		kgo.BlockRebalanceOnPoll(),
		kgo.OnPartitionsAssigned(p.assigned),
		kgo.OnPartitionsRevoked(p.revoked),
		kgo.OnPartitionsLost(p.lost),
		kgo.FetchMaxPartitionBytes(1<<20),
		kgo.RequiredAcks(kgo.AllISRAcks()),
	)
	cl, err := kgo.NewClient(opts...)
	if err != nil {
		return fmt.Errorf("pacer: kafka client: %w", err)
	}
	p.mu.Lock()
	p.cl = cl
	p.mu.Unlock()
	// The DLQ must exist before the first poison record: a produce to a
	// missing topic fails, and the partition would wait on it.
	for {
		_, err := EnsureTopic(ctx, cl, p.cfg.DLQTopic, 1)
		if err == nil {
			break
		}
		if ctx.Err() != nil {
			cl.Close()
			return nil
		}
		p.log.Error("cannot ensure the DLQ topic; retrying", "topic", p.cfg.DLQTopic, "err", err)
		if !sleep(ctx, 5*time.Second) {
			cl.Close()
			return nil
		}
	}
	p.log.Info("pacer started", "topic", p.cfg.Topic, "group", p.cfg.Group,
		"rate", p.cfg.Limit.PerSecond, "burst", p.cfg.Limit.Burst)

	for {
		fetches := cl.PollRecords(ctx, 10000)
		if fetches.IsClientClosed() || ctx.Err() != nil {
			cl.AllowRebalance()
			break
		}
		p.setConsuming(true)
		fetches.EachError(func(t string, part int32, err error) {
			if !errors.Is(err, context.Canceled) {
				p.log.Warn("fetch error", "topic", t, "partition", part, "err", err)
			}
		})
		fetches.EachPartition(func(f kgo.FetchTopicPartition) {
			if len(f.Records) == 0 {
				return
			}
			p.mu.Lock()
			w := p.workers[tp{f.Topic, f.Partition}]
			p.mu.Unlock()
			if w != nil {
				w.push(cl, f.Records)
			}
		})
		cl.AllowRebalance()
	}

	// Shutdown: stop fetching (done), let sends finish within Drain, commit.
	p.setConsuming(false)
	p.log.Info("shutting down: draining in-flight sends", "drain", p.cfg.Drain)
	p.stopAll()
	commitCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), p.cfg.Drain)
	defer cancel()
	if err := cl.CommitMarkedOffsets(commitCtx); err != nil {
		p.log.Error("final commit failed; finished records will be re-delivered", "err", err)
	}
	cl.Close()
	p.log.Info("pacer stopped")
	return nil
}

func (p *Pacer) setConsuming(v bool) {
	p.consuming.Store(v)
	p.publishReady()
}

func (p *Pacer) publishReady() {
	v := 0.0
	if p.Ready() {
		v = 1
	}
	p.m.ready.WithLabelValues().Set(v)
}

func (p *Pacer) assigned(_ context.Context, cl *kgo.Client, parts map[string][]int32) {
	p.mu.Lock()
	defer p.mu.Unlock()
	for topic, ps := range parts {
		for _, part := range ps {
			k := tp{topic, part}
			if p.workers[k] != nil {
				continue
			}
			w := newWorker(p, k)
			p.workers[k] = w
			go w.run(cl)
		}
	}
	// A partition paused by an earlier owner of this client must not stay
	// paused (franz-go keeps pause state across rebalances).
	cl.ResumeFetchPartitions(parts)
	p.m.partitions.WithLabelValues().Set(float64(len(p.workers)))
	p.log.Info("partitions assigned", "partitions", fmt.Sprint(parts))
}

func (p *Pacer) revoked(ctx context.Context, cl *kgo.Client, parts map[string][]int32) {
	p.stop(parts)
	if err := cl.CommitMarkedOffsets(ctx); err != nil {
		p.log.Warn("commit on revoke failed; finished records will be re-delivered", "err", err)
	}
	p.log.Info("partitions revoked", "partitions", fmt.Sprint(parts))
}

func (p *Pacer) lost(_ context.Context, _ *kgo.Client, parts map[string][]int32) {
	p.stop(parts)
	p.log.Warn("partitions lost", "partitions", fmt.Sprint(parts))
}

// stop ends the workers of parts and waits for them; an in-flight send
// finishes (bounded by SendTimeout and the drain deadline).
func (p *Pacer) stop(parts map[string][]int32) {
	var ws []*worker
	p.mu.Lock()
	for topic, ps := range parts {
		for _, part := range ps {
			if w := p.workers[tp{topic, part}]; w != nil {
				ws = append(ws, w)
				delete(p.workers, tp{topic, part})
			}
		}
	}
	p.m.partitions.WithLabelValues().Set(float64(len(p.workers)))
	p.mu.Unlock()
	p.waitWorkers(ws)
}

func (p *Pacer) stopAll() {
	p.mu.Lock()
	ws := make([]*worker, 0, len(p.workers))
	for k, w := range p.workers {
		ws = append(ws, w)
		delete(p.workers, k)
	}
	p.m.partitions.WithLabelValues().Set(0)
	p.mu.Unlock()
	p.waitWorkers(ws)
}

func (p *Pacer) waitWorkers(ws []*worker) {
	for _, w := range ws {
		w.cancel()
	}
	deadline := time.NewTimer(p.cfg.Drain)
	defer deadline.Stop()
	for _, w := range ws {
		select {
		case <-w.done:
		case <-deadline.C:
			p.log.Warn("drain timeout: abandoning in-flight sends; their records will be re-delivered")
			return
		}
	}
}

// worker owns one partition: a queue of fetched records handled in order.
type worker struct {
	p      *Pacer
	tp     tp
	ctx    context.Context // ends when the partition is revoked or the pacer stops
	cancel context.CancelFunc
	done   chan struct{}
	wake   chan struct{}

	mu     sync.Mutex
	queue  []*kgo.Record
	paused bool
}

func newWorker(p *Pacer, k tp) *worker {
	ctx, cancel := context.WithCancel(context.Background())
	return &worker{p: p, tp: k, ctx: ctx, cancel: cancel, done: make(chan struct{}), wake: make(chan struct{}, 1)}
}

func (w *worker) push(cl *kgo.Client, rs []*kgo.Record) {
	w.mu.Lock()
	w.queue = append(w.queue, rs...)
	if len(w.queue) >= w.p.cfg.MaxQueued && !w.paused {
		w.paused = true
		cl.PauseFetchPartitions(map[string][]int32{w.tp.topic: {w.tp.partition}})
	}
	w.mu.Unlock()
	w.p.m.queued.WithLabelValues().Add(float64(len(rs)))
	select {
	case w.wake <- struct{}{}:
	default:
	}
}

func (w *worker) pop(cl *kgo.Client) *kgo.Record {
	w.mu.Lock()
	defer w.mu.Unlock()
	if len(w.queue) == 0 {
		return nil
	}
	r := w.queue[0]
	w.queue[0] = nil
	w.queue = w.queue[1:]
	if w.paused && len(w.queue) <= w.p.cfg.MaxQueued/2 {
		w.paused = false
		cl.ResumeFetchPartitions(map[string][]int32{w.tp.topic: {w.tp.partition}})
	}
	return r
}

func (w *worker) run(cl *kgo.Client) {
	defer close(w.done)
	defer func() {
		w.mu.Lock()
		n := len(w.queue)
		w.queue = nil
		w.mu.Unlock()
		w.p.m.queued.WithLabelValues().Sub(float64(n))
	}()
	for {
		r := w.pop(cl)
		if r == nil {
			select {
			case <-w.ctx.Done():
				return
			case <-w.wake:
				continue
			}
		}
		w.p.m.queued.WithLabelValues().Dec()
		if !w.p.handle(w.ctx, r) {
			return // stopped before the record finished: not marked, re-delivered
		}
		cl.MarkCommitRecords(r)
	}
}

// handle takes one record to a finished state and returns true, or returns
// false when ctx ended first (the record is then left for re-delivery).
func (p *Pacer) handle(ctx context.Context, r *kgo.Record) bool {
	log := p.log.With("partition", r.Partition, "offset", r.Offset)
	env, err := ParseEnvelope(r.Value)
	if err != nil {
		return p.deadLetter(ctx, r, "malformed", err.Error(), log)
	}
	log = log.With("id", env.ID)
	msg := channels.Message{ID: env.ID, Key: env.Key, To: env.To, Payload: env.Payload}
	retry := backoff.NewExponentialBackOff()
	retry.InitialInterval = 500 * time.Millisecond
	retry.MaxInterval = 30 * time.Second
	throttles, attempts := 0, 0
	waitStart := time.Now()
	for {
		if env.Expired(time.Now()) {
			return p.deadLetter(ctx, r, "expired", "expires_at "+env.ExpiresAt.Format(time.RFC3339)+" passed before a send", log)
		}
		if !p.takeToken(ctx, env.Key, log) {
			return false
		}
		p.m.bucketWait.WithLabelValues().Observe(time.Since(waitStart).Seconds())

		sctx, cancel := context.WithTimeout(p.sendCtx, p.cfg.SendTimeout)
		start := time.Now()
		_, err := p.sender.Send(sctx, msg)
		cancel()
		p.m.sendLatency.WithLabelValues().Observe(time.Since(start).Seconds())
		attempts++
		class := channels.ClassOf(err)
		if p.sendCtx.Err() != nil && err != nil {
			// The drain deadline cut the request: its outcome is unknown, so
			// leave the record unfinished for re-delivery.
			log.Warn("send abandoned at drain deadline", "err", err)
			return false
		}
		p.m.sends.WithLabelValues(class.String()).Inc()
		var perr *channels.Error
		errors.As(err, &perr)
		switch class {
		case channels.Success:
			p.m.delivered.WithLabelValues().Inc()
			return true
		case channels.Throttle:
			attempts-- // a throttle is the pacer's fault, not the message's
			throttles++
			d := channels.RetryAfter(err)
			if d <= 0 {
				d = p.cfg.ThrottleCooldown << min(throttles-1, 10)
			}
			d = min(d, p.cfg.MaxCooldown)
			if perr != nil && perr.Scope == channels.ScopePair {
				// Only this recipient is limited: wait here without
				// slowing the whole pacing key.
				log.Info("pair throttled; retrying this message later", "code", perr.Code, "after", d)
				if !sleep(ctx, d) {
					return false
				}
			} else {
				log.Info("throttled; pacing key cools down", "code", codeOf(perr), "cooldown", d)
				p.cooldown(ctx, env.Key, d, log)
			}
			waitStart = time.Now()
		case channels.Transient:
			if attempts >= p.cfg.MaxAttempts {
				return p.deadLetter(ctx, r, "attempts-exhausted", fmt.Sprintf("%d attempts, last: %v", attempts, err), log)
			}
			d := retry.NextBackOff()
			if ra := channels.RetryAfter(err); ra > d {
				d = min(ra, p.cfg.MaxCooldown)
			}
			log.Warn("transient failure; retrying", "attempt", attempts, "after", d, "err", err)
			if !sleep(ctx, d) {
				return false
			}
			waitStart = time.Now()
		case channels.Permanent:
			return p.deadLetter(ctx, r, "permanent:"+codeOf(perr), err.Error(), log)
		case channels.Halt:
			attempts--
			log.Error("provider refuses this pacing key (credentials or account); cooling down, nothing dropped",
				"code", codeOf(perr), "cooldown", p.cfg.HaltCooldown, "err", err)
			p.cooldown(ctx, env.Key, p.cfg.HaltCooldown, log)
			waitStart = time.Now()
		}
	}
}

func codeOf(e *channels.Error) string {
	if e == nil || e.Code == "" {
		return "none"
	}
	return e.Code
}

// takeToken waits until the bucket of key grants a token. Redis errors are
// retried with back-off (the record is never dropped). It returns false only
// when ctx ends.
func (p *Pacer) takeToken(ctx context.Context, key string, log *slog.Logger) bool {
	fail := backoff.NewExponentialBackOff()
	fail.InitialInterval = 100 * time.Millisecond
	fail.MaxInterval = 5 * time.Second
	for {
		start := time.Now()
		d, err := p.bucket.Take(ctx, p.cfg.Channel, key, p.cfg.Limit, 1)
		p.m.takeLatency.WithLabelValues().Observe(time.Since(start).Seconds())
		if err != nil {
			if ctx.Err() != nil {
				return false
			}
			p.m.redisErrors.WithLabelValues().Inc()
			if p.redisOK.Swap(false) {
				log.Error("token bucket unavailable; sends stop until Redis answers", "err", err)
				p.publishReady()
			}
			if !sleep(ctx, fail.NextBackOff()) {
				return false
			}
			continue
		}
		if !p.redisOK.Swap(true) {
			log.Info("token bucket reachable again")
			p.publishReady()
		}
		if d.Allowed {
			return true
		}
		// Jitter a cooldown wake-up by up to 10% so waiters on one key do not
		// all return in the same instant.
		wait := d.Wait
		if d.Cooldown {
			wait += time.Duration(rand.Int64N(int64(wait)/10 + 1))
		}
		if !sleep(ctx, wait) {
			return false
		}
	}
}

func (p *Pacer) cooldown(ctx context.Context, key string, d time.Duration, log *slog.Logger) {
	if err := p.bucket.Cooldown(ctx, p.cfg.Channel, key, d); err != nil {
		// The shared cooldown failed; at least this worker waits.
		log.Warn("could not store cooldown in Redis; waiting locally", "err", err)
		sleep(ctx, d)
	}
}

// deadLetter writes r to the DLQ topic with its reason and returns true once
// Kafka acknowledged it. It retries until ctx ends (returning false) so a
// record is never finished without reaching the DLQ.
func (p *Pacer) deadLetter(ctx context.Context, r *kgo.Record, reason, detail string, log *slog.Logger) bool {
	if len(detail) > 512 {
		detail = detail[:512]
	}
	label := reason
	if i := len("permanent:"); len(reason) > i && reason[:i] == "permanent:" {
		label = "permanent"
	}
	dr := &kgo.Record{
		Topic: p.cfg.DLQTopic,
		Key:   r.Key,
		Value: r.Value,
		Headers: append(append([]kgo.RecordHeader{}, r.Headers...),
			kgo.RecordHeader{Key: "pacer-reason", Value: []byte(reason)},
			kgo.RecordHeader{Key: "pacer-detail", Value: []byte(detail)},
			kgo.RecordHeader{Key: "pacer-channel", Value: []byte(p.cfg.Channel)},
			kgo.RecordHeader{Key: "pacer-original-topic", Value: []byte(r.Topic)},
			kgo.RecordHeader{Key: "pacer-original-partition", Value: []byte(strconv.Itoa(int(r.Partition)))},
			kgo.RecordHeader{Key: "pacer-original-offset", Value: []byte(strconv.FormatInt(r.Offset, 10))},
		),
	}
	fail := backoff.NewExponentialBackOff()
	fail.MaxInterval = 10 * time.Second
	for {
		pctx, cancel := context.WithTimeout(ctx, 30*time.Second)
		err := p.cl.ProduceSync(pctx, dr).FirstErr()
		cancel()
		if err == nil {
			p.m.dlq.WithLabelValues(label).Inc()
			log.Warn("dead-lettered", "reason", reason, "detail", detail)
			return true
		}
		if ctx.Err() != nil {
			return false
		}
		log.Error("DLQ write failed; retrying", "err", err)
		if !sleep(ctx, fail.NextBackOff()) {
			return false
		}
	}
}

// sleep waits for d or until ctx ends, and reports whether the full wait
// happened.
func sleep(ctx context.Context, d time.Duration) bool {
	if d <= 0 {
		return ctx.Err() == nil
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-t.C:
		return true
	}
}
