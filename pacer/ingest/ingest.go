// Package ingest is `pacer ingest`: the HTTP way in for many tenants. A
// tenant POSTs one envelope, or up to [MaxBatch] as NDJSON, to
// /v1/channels/{channel}/messages with its API key; the gateway checks
// every quota tier (client IP, tenant requests/s, tenant messages/day,
// channel messages/s) and claims the envelope ids in one atomic Redis step
// (its subpackage quota), produces the envelopes to the channel's topic as
// `pacer publish` does, and answers 202 only once Kafka acknowledged every
// record. A tenant reads what became of its messages (GET
// /v1/messages/{id}, messages.go) and lists, reads, pauses, resumes and
// cancels its own campaigns, those it first published to
// (/v1/channels/{channel}/campaigns, campaigns.go). Every answer carries
// the IETF RateLimit-Policy and RateLimit fields (see headers.go); errors
// are RFC 9457 problem+json. The API is
// described by openapi.yaml in this package, served at /openapi.yaml, with
// the process's /healthz, /readyz and /metrics (ops.go).
//
// # Metrics
//
//	pacer_ingest_requests_total{code}                 answers of the API by HTTP status
//	pacer_ingest_messages_total{outcome}              envelope lines: accepted, duplicate, rejected (every invalid line, a 400's too), failed
//	pacer_ingest_quota_refusals_total{tier}           429s by the tier that refused
//	pacer_ingest_request_duration_seconds             time to answer a POST
//	pacer_ingest_redis_calls_total{call}              Redis round trips: take, finish (quota scripts), claim (campaign and pacing key owners), published
//	pacer_ingest_redis_errors_total                   quota calls that failed on Redis
//	pacer_ingest_redis_fallback                       1 while quotas are per process (PACER_REDIS_FAILURE=local)
package ingest

import (
	"bytes"
	"context"
	"crypto/sha256"
	_ "embed"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"mime"
	"net"
	"net/http"
	"net/netip"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/pacerhq/pacer/bucket"
	"github.com/pacerhq/pacer/pacer/envelope"
	"github.com/pacerhq/pacer/pacer/ingest/quota"
	"github.com/pacerhq/pacer/pacer/ingest/window"
	"github.com/pacerhq/pacer/pacer/produce"
	"github.com/pacerhq/pacer/partitioner"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/twmb/franz-go/pkg/kgo"
)

// Request limits.
const (
	// MaxBatch is the most envelopes one NDJSON request may carry.
	MaxBatch = 1000
	// MaxEnvelopeBytes is the largest envelope (one JSON body or one NDJSON
	// line) accepted: 1 MiB. Larger: 413.
	MaxEnvelopeBytes = 1 << 20
	// MaxRequestBytes is the largest request body accepted: 10 MiB. Larger: 413.
	MaxRequestBytes = 10 << 20
)

// OpenAPI is the OpenAPI 3.1 description of the API.
//
//go:embed openapi.yaml
var OpenAPI []byte

// Config configures a [Server]. Zero means the default named per field.
type Config struct {
	// Channels the gateway serves; topic TopicPrefix + channel. Required.
	Channels []string
	// TopicPrefix starts every channel topic; default "pacer.".
	TopicPrefix string
	// IPLimit is the request rate and burst per client IP. Required.
	IPLimit bucket.Limit
	// ChannelLimit is the message rate and burst per channel, all tenants
	// together. Required; its burst must be >= MaxBatch so a full batch
	// can ever be admitted.
	ChannelLimit bucket.Limit
	// TrustedProxies: a request whose peer is in one of these has its
	// client address taken from X-Forwarded-For (the right-most address
	// not itself trusted). Default none: X-Forwarded-For is ignored.
	TrustedProxies []netip.Prefix
	// IdempotencyTTL is how long accepted ids and Idempotency-Key answers
	// are remembered; default 24h.
	IdempotencyTTL time.Duration
	// ProduceTimeout bounds the wait for Kafka's acknowledgement; past it
	// the request gets 503; default 10s.
	ProduceTimeout time.Duration
	// Partitions is the partition count used for a topic whose metadata
	// cannot be read; default 12, as `pacer publish` creates topics.
	Partitions int
	// RedisFailure is "closed" (503 while Redis is down, the default) or
	// "local" (quotas per process at 1/Replicas of each limit).
	RedisFailure string
	Logger       *slog.Logger
}

// Deps are the Server's connections.
type Deps struct {
	Kafka    *kgo.Client // idempotent producer, acks=all, kgo.ManualPartitioner
	Quota    quota.Quota // quota.New(redis)
	Fallback *quota.Local
	Keys     bucket.Keys
	Tenants  func() *Tenants
	// RedisPing reports whether Redis answers, for /readyz.
	RedisPing func(ctx context.Context) error
	// KafkaPing reports whether a Kafka broker answers, for /readyz
	// (kgo.Client.Ping): without Kafka every request waits out
	// ProduceTimeout and gets 503, so the gateway is not ready.
	KafkaPing func(ctx context.Context) error
	// Metrics, if set, serves GET /metrics (the Prometheus registry's
	// handler) on the API's address.
	Metrics http.Handler
	// Campaigns, if set, counts the envelopes accepted per campaign (once
	// Kafka acknowledged them; a duplicate is not counted again) for
	// `pacer campaign status` and the status page.
	Campaigns PublishedCounter
	// Messages, if set, answers GET /v1/messages/{id} (a tenant's own
	// messages); without it that path answers 404.
	Messages MessageLookup
	// Control, if set, gives each campaign published through the API to
	// the tenant that first published to it (a publish naming another's
	// is 409) and serves a tenant its own campaigns under
	// /v1/channels/{channel}/campaigns (campaigns.go); without it no
	// campaign is owned and those paths list none and answer 404.
	Control CampaignControl
}

// PublishedCounter adds envelopes published per campaign to the
// campaigns' counters; *control.Store implements it.
type PublishedCounter interface {
	AddPublished(ctx context.Context, channel string, byCampaign map[string]int64) error
}

// Server is the ingest HTTP handler. Safe for concurrent use.
type Server struct {
	cfg  Config
	deps Deps
	log  *slog.Logger
	m    *metrics
	mux  *http.ServeMux // the API's paths
	ops  *http.ServeMux // /healthz, /readyz, /metrics (ops.go)

	fallback   atomic.Bool // Redis down and local quotas in use
	partitions sync.Map    // topic -> int
	ownedKeys  ownedKeys   // pacing keys known to be a tenant's (campaigns.go)
}

// New validates cfg and returns a Server registering its metrics on reg.
func New(cfg Config, deps Deps, reg prometheus.Registerer) (*Server, error) {
	if cfg.IdempotencyTTL == 0 {
		cfg.IdempotencyTTL = 24 * time.Hour
	}
	if cfg.ProduceTimeout == 0 {
		cfg.ProduceTimeout = 10 * time.Second
	}
	if cfg.TopicPrefix == "" {
		cfg.TopicPrefix = "pacer."
	}
	if cfg.Partitions == 0 {
		cfg.Partitions = 12
	}
	if cfg.RedisFailure == "" {
		cfg.RedisFailure = "closed"
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	var errs []error
	if len(cfg.Channels) == 0 {
		errs = append(errs, errors.New("ingest: at least one channel is required"))
	}
	if err := cfg.IPLimit.Validate(); err != nil {
		errs = append(errs, fmt.Errorf("ingest: ip limit: %w", err))
	}
	if err := cfg.ChannelLimit.Validate(); err != nil {
		errs = append(errs, fmt.Errorf("ingest: channel limit: %w", err))
	} else if cfg.ChannelLimit.Burst < MaxBatch {
		errs = append(errs, fmt.Errorf("ingest: channel burst %d must be >= %d (a full batch)", cfg.ChannelLimit.Burst, MaxBatch))
	}
	if cfg.RedisFailure != "closed" && cfg.RedisFailure != "local" {
		errs = append(errs, fmt.Errorf("ingest: redis failure %q is not closed or local", cfg.RedisFailure))
	}
	if cfg.RedisFailure == "local" && deps.Fallback == nil {
		errs = append(errs, errors.New("ingest: redis failure local needs a Fallback"))
	}
	if deps.Kafka == nil || deps.Quota == nil || deps.Tenants == nil {
		errs = append(errs, errors.New("ingest: Kafka, Quota and Tenants are required"))
	}
	if len(errs) > 0 {
		return nil, errors.Join(errs...)
	}
	s := &Server{cfg: cfg, deps: deps, log: cfg.Logger, m: newMetrics(reg), mux: http.NewServeMux(), ops: http.NewServeMux()}
	s.registerOps(s.ops)
	s.mux.HandleFunc("POST /v1/channels/{channel}/messages", s.post)
	s.mux.HandleFunc("/v1/channels/{channel}/messages", s.notAllowed("POST"))
	s.mux.HandleFunc("GET /v1/messages/{id}", s.getMessage)
	s.mux.HandleFunc("/v1/messages/{id}", s.notAllowed(messagesAllow))
	s.registerCampaigns(s.mux)
	s.mux.HandleFunc("GET /openapi.yaml", func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "application/yaml")
		w.Write(OpenAPI)
	})
	s.mux.HandleFunc("/openapi.yaml", s.notAllowed(opsAllow))
	s.mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		s.refuse(w, r, problem{Type: "https://pacer.dev/problems/not-found", Title: "Not Found", Status: http.StatusNotFound,
			Detail: fmt.Sprintf("no resource at %q; messages are POSTed to /v1/channels/{channel}/messages", r.URL.Path)})
	})
	return s, nil
}

// notAllowed answers 405 with Allow: allow (RFC 9110, section 15.5.6).
func (s *Server) notAllowed(allow string) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		s.refuse(w, r, problem{Type: "https://pacer.dev/problems/method-not-allowed", Title: "Method Not Allowed", Status: http.StatusMethodNotAllowed,
			Detail: fmt.Sprintf("%s is not allowed on %s; allowed: %s", r.Method, r.URL.Path, allow)}, "Allow", allow)
	}
}

// ServeHTTP serves the API and the ops paths (ops.go).
func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if h, pattern := s.ops.Handler(r); pattern != "" {
		h.ServeHTTP(w, r)
		return
	}
	rw := &statusWriter{ResponseWriter: w}
	defer func() {
		if rw.status == 0 {
			rw.status = http.StatusOK
		}
		s.m.requests.WithLabelValues(strconv.Itoa(rw.status)).Inc()
	}()
	s.mux.ServeHTTP(rw, r)
}

// line is one envelope of a request.
type line struct {
	n     int // 1-based line number
	env   envelope.Envelope
	value []byte
	err   *envelope.Error
	dupOf int // > 0: the same id as line dupOf of this request
	idx   int // index into the request's distinct ids
}

// Accepted is one accepted envelope in a 202 answer.
type Accepted struct {
	Line int    `json:"line"`
	ID   string `json:"id"`
	// Duplicate is true when the id was accepted before (by an earlier
	// request or an earlier line): no second record was produced.
	Duplicate bool `json:"duplicate,omitempty"`
}

// Rejected is one envelope not accepted. Field names the envelope field at
// fault, [WholeEnvelope] for a line that is not a JSON object or not valid
// JSON, and is empty for a valid line Kafka did not acknowledge.
type Rejected struct {
	Line  int    `json:"line"`
	ID    string `json:"id,omitempty"`
	Field string `json:"field,omitempty"`
	Error string `json:"error"`
}

// Answer is the body of a 202 (and of a 503 that produced part of a batch).
type Answer struct {
	Accepted []Accepted `json:"accepted"`
	Rejected []Rejected `json:"rejected"`
}

func (s *Server) post(w http.ResponseWriter, r *http.Request) {
	start := time.Now()
	defer func() { s.m.duration.Observe(time.Since(start).Seconds()) }()
	s.handle(w, r)
}

// ipTier is the quota tier of r's client IP.
func (s *Server) ipTier(r *http.Request) quota.Tier {
	return quota.Tier{Name: "ip", Key: s.deps.Keys.Ingest("ip", s.clientIP(r).String()), Unit: quota.PerRequest, Bucket: &s.cfg.IPLimit}
}

// refuse answers problem p (its Status set) with the header pairs h, after
// counting the request against its client IP alone: unauthenticated,
// forbidden and malformed requests cost their IP and nothing else. A spent
// IP tier answers 429 instead.
func (s *Server) refuse(w http.ResponseWriter, r *http.Request, p problem, h ...string) {
	if !s.charge(w, r, []quota.Tier{s.ipTier(r)}) {
		return
	}
	for i := 0; i+1 < len(h); i += 2 {
		w.Header().Set(h[i], h[i+1])
	}
	writeProblem(w, p)
}

// charge counts r as one request of each of tiers and sets their
// RateLimit fields; it returns false once it answered instead: 429 when a
// tier is spent, or the quota store's failure (see take).
func (s *Server) charge(w http.ResponseWriter, r *http.Request, tiers []quota.Tier) bool {
	res, ok := s.take(r.Context(), w, quota.Request{Tiers: tiers, ClaimTTL: time.Second})
	if !ok {
		return false
	}
	setRateLimit(w.Header(), tiers, res)
	if !res.Granted {
		s.tooMany(w, tiers, res)
		return false
	}
	return true
}

// authenticate returns the tenant of r's API key (Authorization: Bearer),
// or answers 401 problem+json naming what is wrong (no bearer key, or a
// key not known) and returns nil.
func (s *Server) authenticate(w http.ResponseWriter, r *http.Request) *Tenant {
	key, ok := bearer(r.Header.Get("Authorization"))
	if tenant := s.deps.Tenants().Lookup(key); ok && tenant != nil {
		return tenant
	}
	detail := "the Authorization header must be \"Bearer <api key>\""
	if ok {
		detail = "the API key is not known"
	}
	s.refuse(w, r, problem{Type: "https://pacer.dev/problems/unauthorized", Title: "Unauthorized", Status: http.StatusUnauthorized, Detail: detail},
		"WWW-Authenticate", `Bearer realm="pacer"`)
	return nil
}

func (s *Server) handle(w http.ResponseWriter, r *http.Request) {
	ctx := r.Context()
	ipTier := s.ipTier(r)
	channel := r.PathValue("channel")
	refuse := func(status int, p problem, h ...string) {
		p.Status = status
		s.refuse(w, r, p, h...)
	}
	tenant := s.authenticate(w, r)
	if tenant == nil {
		return
	}
	if !s.serves(channel) {
		refuse(http.StatusNotFound, problem{Type: "https://pacer.dev/problems/unknown-channel", Title: "Unknown channel",
			Detail: fmt.Sprintf("channel %q is not served here (%s)", channel, strings.Join(s.cfg.Channels, ", "))})
		return
	}
	if !tenant.Allowed(channel) {
		refuse(http.StatusForbidden, problem{Type: "https://pacer.dev/problems/forbidden-channel", Title: "Channel not allowed",
			Detail: fmt.Sprintf("tenant %q may not publish to channel %q", tenant.ID, channel)})
		return
	}

	tiers := []quota.Tier{
		ipTier,
		{Name: "tenant", Key: s.deps.Keys.Ingest("tenant", tenant.ID), Unit: quota.PerRequest,
			Bucket: &bucket.Limit{PerSecond: tenant.RequestsPerSecond, Burst: tenant.Burst}},
		{Name: "tenant-day", Key: s.deps.Keys.Ingest("tenant-day", tenant.ID), Unit: quota.PerMessage,
			Window: &window.Window{Max: tenant.MessagesPerDay, Period: 24 * time.Hour}},
		{Name: "channel", Key: s.deps.Keys.Ingest("channel", channel), Unit: quota.PerMessage, Bucket: &s.cfg.ChannelLimit},
	}
	// Until the quota step has answered, headers describe the policies with
	// nothing known of the counts: the body errors below come first, and a
	// request refused for its body costs nothing.
	lines, digest, perr := s.readBody(w, r, tenant)
	if perr != nil {
		refuse(perr.Status, perr.problem, perr.header...)
		return
	}
	valid := 0
	for _, l := range lines {
		if l.err == nil {
			valid++
		}
	}
	if valid == 0 {
		// Every line is rejected: each counts, as a rejected line of a 202
		// does.
		s.m.messages.WithLabelValues("rejected").Add(float64(len(lines)))
		p := problem{Type: "https://pacer.dev/problems/invalid-envelope", Title: "Invalid envelope", Status: http.StatusBadRequest}
		for _, l := range lines {
			p.InvalidParams = append(p.InvalidParams, invalidParam{Line: l.n, ID: l.env.ID, Name: fieldOf(l.err), Reason: l.err.Error()})
		}
		if len(lines) == 1 {
			p.Detail = lines[0].err.Error()
		} else {
			p.Detail = fmt.Sprintf("all %d envelopes are invalid", len(lines))
		}
		refuse(http.StatusBadRequest, p)
		return
	}
	for _, t := range tiers[2:] {
		if valid > t.Capacity() {
			refuse(http.StatusRequestEntityTooLarge, problem{Type: "https://pacer.dev/problems/batch-over-quota", Title: "Batch larger than a quota",
				Detail: fmt.Sprintf("%d envelopes exceed policy %q, which allows at most %d at once; split the batch", valid, t.Name, t.Capacity())})
			return
		}
	}
	// Campaigns and pacing keys are claimed before the quota step, so
	// nothing is counted or produced for a batch naming another tenant's.
	if cp := s.claim(ctx, channel, tenant, lines); cp != nil {
		refuse(cp.Status, cp.problem, cp.header...)
		return
	}

	// Distinct ids, in line order.
	var idKeys []string
	first := map[string]int{}
	for i := range lines {
		l := &lines[i]
		if l.err != nil {
			continue
		}
		if f, ok := first[l.env.ID]; ok {
			l.dupOf = f
			continue
		}
		first[l.env.ID] = l.n
		l.idx = len(idKeys)
		idKeys = append(idKeys, s.deps.Keys.Ingest("id", tenant.ID+":"+channel+":"+l.env.ID))
	}
	var idemKey string
	if k := r.Header.Get("Idempotency-Key"); k != "" {
		if len(k) > 255 {
			refuse(http.StatusBadRequest, problem{Type: "https://pacer.dev/problems/invalid-header", Title: "Invalid header",
				Detail: "Idempotency-Key: at most 255 bytes", InvalidParams: []invalidParam{{Name: "Idempotency-Key", Reason: "at most 255 bytes"}}})
			return
		}
		idemKey = s.deps.Keys.Ingest("ikey", tenant.ID+":"+channel+":"+k)
	}
	req := quota.Request{Tiers: tiers, IDs: idKeys, IdemKey: idemKey, ClaimTTL: s.cfg.ProduceTimeout + 30*time.Second}
	res, ok := s.take(ctx, w, req)
	if !ok {
		return
	}
	setRateLimit(w.Header(), tiers, res)
	if res.Known {
		s.replay(w, res.Stored, digest)
		return
	}
	if !res.Granted {
		if res.Tiers[res.Refused].Wait < 0 {
			t := tiers[res.Refused]
			writeProblem(w, problem{Type: "https://pacer.dev/problems/batch-over-quota", Title: "Batch larger than a quota",
				Status: http.StatusRequestEntityTooLarge, Tier: t.Name,
				Detail: fmt.Sprintf("policy %q allows at most %d at once; split the batch", t.Name, t.Capacity())})
			return
		}
		s.tooMany(w, tiers, res)
		return
	}
	s.produce(ctx, w, channel, tenant, lines, req, res, digest)
}

// produce sends the new envelopes, settles the claims and answers.
func (s *Server) produce(ctx context.Context, w http.ResponseWriter, channel string, tenant *Tenant, lines []line, req quota.Request, res quota.Result, digest string) {
	topic := s.cfg.TopicPrefix + channel
	// One deadline for the whole request: the partition lookup (a metadata
	// request, or a topic creation, while the count is not known yet) and
	// the produce share ProduceTimeout, so a silent Kafka is answered 503 at
	// ProduceTimeout, not after the lookup's own wait as well.
	pctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), s.cfg.ProduceTimeout)
	defer cancel()
	parts := s.partitionCount(pctx, topic)
	var (
		wg         sync.WaitGroup
		mu         sync.Mutex
		liveFailed = map[int]error{} // by id index; the callbacks write it under mu
		liveAcked  = map[int]bool{}  // by id index; likewise
		pending    = 0
	)
	campaignOf := map[int]string{} // by id index, for a late acknowledgement
	keyOf := map[int]string{}      // by id index: the pacing key its done record names
	for i := range lines {
		l := &lines[i]
		if l.err != nil || l.dupOf > 0 || res.IDs[l.idx] != quota.IDNew {
			continue
		}
		pending++
		keyOf[l.idx] = l.env.Key
		rec := &kgo.Record{Topic: topic, Key: []byte(l.env.Key), Value: l.value,
			Partition: partitioner.Partition([]byte(l.env.Key), parts)}
		if l.env.Campaign != "" {
			rec.Headers = append(rec.Headers, kgo.RecordHeader{Key: envelope.HeaderCampaign, Value: []byte(l.env.Campaign)})
			campaignOf[l.idx] = l.env.Campaign
		}
		wg.Add(1)
		idx := l.idx
		s.deps.Kafka.Produce(pctx, rec, func(_ *kgo.Record, err error) {
			defer wg.Done()
			mu.Lock()
			defer mu.Unlock()
			if err != nil {
				liveFailed[idx] = err
			} else {
				liveAcked[idx] = true
			}
		})
	}
	// The answer is due at ProduceTimeout whatever Kafka does: a record
	// already in a produce request when Kafka stopped answering is neither
	// acknowledged nor failed (the idempotent producer keeps retrying it
	// until Kafka answers), so its callback may come much later. Its id
	// stays claimed and is settled when the callback comes (see settleLate).
	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()
	late := map[int]bool{} // by id index: no answer from Kafka by the timeout
	failed, acked := liveFailed, liveAcked
	select {
	case <-done:
	case <-pctx.Done():
		mu.Lock()
		for i := range lines {
			l := &lines[i]
			if l.err == nil && l.dupOf == 0 && res.IDs[l.idx] == quota.IDNew && !acked[l.idx] && failed[l.idx] == nil {
				late[l.idx] = true
			}
		}
		failed, acked = maps.Clone(liveFailed), maps.Clone(liveAcked)
		mu.Unlock()
		go func() {
			<-done // every callback has come: the live maps are final
			s.settleLate(context.WithoutCancel(ctx), liveAcked, liveFailed, late, campaignOf, keyOf, req.IDs, res.Token, channel)
		}()
	}

	// Envelopes by outcome, added to the metric once per request.
	const (
		accepted = iota
		duplicate
		rejected
		failedOutcome
	)
	var outcomes [4]float64
	defer func() {
		for i, o := range [4]string{"accepted", "duplicate", "rejected", "failed"} {
			if outcomes[i] > 0 {
				s.m.messages.WithLabelValues(o).Add(outcomes[i])
			}
		}
	}()
	var ans Answer
	var fin quota.Finish
	fin.Token, fin.IdemKey, fin.DoneTTL = res.Token, req.IdemKey, s.cfg.IdempotencyTTL
	var produceErr error
	published := map[string]int64{} // accepted new envelopes by campaign
	for i := range lines {
		l := &lines[i]
		switch {
		case l.err != nil:
			ans.Rejected = append(ans.Rejected, Rejected{Line: l.n, ID: l.env.ID, Field: fieldOf(l.err), Error: l.err.Error()})
			outcomes[rejected]++
		case l.dupOf > 0:
			// Settled with its first line below: accepted only if that was.
		case res.IDs[l.idx] == quota.IDDone:
			ans.Accepted = append(ans.Accepted, Accepted{Line: l.n, ID: l.env.ID, Duplicate: true})
			outcomes[duplicate]++
		case res.IDs[l.idx] == quota.IDPending:
			ans.Rejected = append(ans.Rejected, Rejected{Line: l.n, ID: l.env.ID, Field: "id",
				Error: "envelope: id: being accepted by another request right now; retry later"})
			outcomes[rejected]++
		case late[l.idx]:
			produceErr = errProduceTimeout
			ans.Rejected = append(ans.Rejected, Rejected{Line: l.n, ID: l.env.ID,
				Error: "not acknowledged by Kafka within the produce timeout; retry later with the same id (if it was written meanwhile, the retry is answered duplicate)"})
			outcomes[failedOutcome]++
		case failed[l.idx] != nil:
			produceErr = failed[l.idx]
			fin.Release = append(fin.Release, req.IDs[l.idx])
			ans.Rejected = append(ans.Rejected, Rejected{Line: l.n, ID: l.env.ID, Error: "not acknowledged by Kafka; retry later"})
			outcomes[failedOutcome]++
		default:
			fin.Done = append(fin.Done, req.IDs[l.idx])
			fin.DoneKeys = append(fin.DoneKeys, l.env.Key)
			ans.Accepted = append(ans.Accepted, Accepted{Line: l.n, ID: l.env.ID})
			outcomes[accepted]++
			if l.env.Campaign != "" {
				published[l.env.Campaign]++
			}
		}
	}
	// Repeated lines follow their first line's outcome.
	byLine := map[int]bool{}
	for _, a := range ans.Accepted {
		byLine[a.Line] = true
	}
	for _, l := range lines {
		if l.err == nil && l.dupOf > 0 {
			if byLine[l.dupOf] {
				ans.Accepted = append(ans.Accepted, Accepted{Line: l.n, ID: l.env.ID, Duplicate: true})
				outcomes[duplicate]++
			} else {
				ans.Rejected = append(ans.Rejected, Rejected{Line: l.n, ID: l.env.ID, Field: "id",
					Error: fmt.Sprintf("envelope: id: same id as line %d, which was not accepted", l.dupOf)})
			}
		}
	}
	sortAnswer(&ans)

	status := http.StatusAccepted
	if produceErr != nil {
		status = http.StatusServiceUnavailable
		s.log.Warn("kafka did not acknowledge; answering 503", "topic", topic, "failed", len(failed), "err", produceErr)
	}
	if len(ans.Accepted) == 0 && status == http.StatusAccepted && pending == 0 {
		// Every valid line was claimed by another request in flight.
		status = http.StatusConflict
	}
	body, _ := json.Marshal(ans)
	if status == http.StatusAccepted && req.IdemKey != "" {
		stored, _ := json.Marshal(storedAnswer{Status: status, Body: string(body), Digest: digest})
		fin.Stored = string(stored)
	}
	s.finish(context.WithoutCancel(ctx), fin)
	s.countPublished(context.WithoutCancel(ctx), channel, published)

	switch status {
	case http.StatusServiceUnavailable:
		w.Header().Set("Retry-After", "1")
		writeProblem(w, problem{Type: "https://pacer.dev/problems/kafka-unavailable", Title: "Kafka unavailable", Status: status,
			Detail: "Kafka did not acknowledge every envelope; the ones listed as accepted are kept, retry the others", Answer: &ans})
	case http.StatusConflict:
		w.Header().Set("Retry-After", "1")
		writeProblem(w, problem{Type: "https://pacer.dev/problems/in-progress", Title: "Request in progress", Status: status,
			Detail: "another request is accepting these envelope ids right now; retry later", Answer: &ans})
	default:
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(status)
		w.Write(body)
	}
}

// errProduceTimeout: Kafka answered neither way within ProduceTimeout.
var errProduceTimeout = errors.New("no acknowledgement within the produce timeout")

// settleLate settles the claims of the late ids of a request already
// answered 503, once every produce callback has come (acked and failed are
// then final): an acknowledged id is recorded as accepted (a retry of it is
// then answered duplicate) and counted for its campaign, a failed one is
// released for a retry. ids are the request's id keys and token its claim
// token. Until it runs, a retry of a late
// id is answered "being accepted by another request right now"; should
// Kafka stay silent past the claim TTL the claim lapses and a retry
// produces again (the pacer's idempotency ledger keeps that from being
// sent twice).
func (s *Server) settleLate(ctx context.Context, acked map[int]bool, failed map[int]error, late map[int]bool, campaignOf, keyOf map[int]string, ids []string, token, channel string) {
	fin := quota.Finish{Token: token, DoneTTL: s.cfg.IdempotencyTTL}
	published := map[string]int64{}
	for idx := range late {
		switch {
		case acked[idx]:
			fin.Done = append(fin.Done, ids[idx])
			fin.DoneKeys = append(fin.DoneKeys, keyOf[idx])
			if c := campaignOf[idx]; c != "" {
				published[c]++
			}
		default:
			fin.Release = append(fin.Release, ids[idx])
		}
	}
	s.log.Info("kafka answered after the produce timeout; claims settled", "channel", channel,
		"acknowledged", len(fin.Done), "failed", len(fin.Release))
	s.finish(ctx, fin)
	s.countPublished(ctx, channel, published)
}

type storedAnswer struct {
	Status int    `json:"status"`
	Body   string `json:"body"`
	Digest string `json:"digest"` // SHA-256 of the request body, hex: a reused key must come with the same body
}

// replay answers a request whose Idempotency-Key was seen: the stored
// answer, 409 while the first request is still producing, or 422 when the
// key comes with another body than the first time (digest differs).
func (s *Server) replay(w http.ResponseWriter, stored, digest string) {
	var a storedAnswer
	if strings.HasPrefix(stored, "p:") || json.Unmarshal([]byte(stored), &a) != nil || a.Status == 0 {
		w.Header().Set("Retry-After", "1")
		writeProblem(w, problem{Type: "https://pacer.dev/problems/in-progress", Title: "Request in progress", Status: http.StatusConflict,
			Detail: "a request with this Idempotency-Key is being processed; retry later"})
		return
	}
	if a.Digest != "" && a.Digest != digest {
		writeProblem(w, problem{Type: "https://pacer.dev/problems/idempotency-key-reused", Title: "Idempotency-Key reused",
			Status:        http.StatusUnprocessableEntity,
			Detail:        "this Idempotency-Key was used with another request body; use a new key for new content",
			InvalidParams: []invalidParam{{Name: "Idempotency-Key", Reason: "already used with another body"}}})
		return
	}
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Idempotent-Replayed", "true")
	w.WriteHeader(a.Status)
	io.WriteString(w, a.Body)
}

// take runs the quota step, on Redis or, when Redis fails and the failure
// mode is local, on the process's share. It answers 503 itself and returns
// false when it cannot.
func (s *Server) take(ctx context.Context, w http.ResponseWriter, req quota.Request) (quota.Result, bool) {
	s.m.redisCalls.WithLabelValues("take").Inc()
	res, err := s.deps.Quota.Take(ctx, req)
	if err == nil {
		if s.fallback.CompareAndSwap(true, false) {
			s.log.Info("redis answers again; quotas are shared again")
			s.m.fallback.Set(0)
		}
		return res, true
	}
	if errors.Is(err, quota.ErrInvalid) {
		s.log.Error("quota request invalid", "err", err)
		writeProblem(w, problem{Type: "about:blank", Title: "Internal Server Error", Status: http.StatusInternalServerError})
		return res, false
	}
	s.m.redisErrors.Inc()
	if s.cfg.RedisFailure == "local" && ctx.Err() == nil {
		if s.fallback.CompareAndSwap(false, true) {
			s.log.Warn("redis unreachable; quotas are per process at a share of each limit until it answers", "err", err)
			s.m.fallback.Set(1)
		}
		res, err = s.deps.Fallback.Take(ctx, req)
		if err == nil {
			return res, true
		}
	}
	s.log.Warn("redis unreachable; answering 503", "err", err)
	w.Header().Set("Retry-After", "1")
	writeProblem(w, problem{Type: "https://pacer.dev/problems/quota-unavailable", Title: "Quota store unavailable", Status: http.StatusServiceUnavailable,
		Detail: "the quota store does not answer; retry later"})
	return res, false
}

func (s *Server) finish(ctx context.Context, f quota.Finish) {
	if len(f.Done)+len(f.Release) == 0 && f.IdemKey == "" {
		return
	}
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	s.m.redisCalls.WithLabelValues("finish").Inc()
	err := s.deps.Quota.Finish(ctx, f)
	if err != nil || s.fallback.Load() {
		// Keep the process's own record too: it is what Local reads.
		if s.deps.Fallback != nil {
			s.deps.Fallback.Finish(ctx, f)
		}
	}
	if err != nil {
		s.m.redisErrors.Inc()
		s.log.Warn("redis: accepted ids not recorded; a retry of them within the claim TTL is refused, after it produced again", "err", err)
	}
}

// countPublished adds the accepted envelopes per campaign to the
// campaigns' published counters: one pipelined Redis round trip per
// request that carries campaigns. Best effort: a failure is logged and
// counted as a Redis error; the envelopes stay accepted (the campaign's
// published count is then short by them).
func (s *Server) countPublished(ctx context.Context, channel string, byCampaign map[string]int64) {
	if s.deps.Campaigns == nil || len(byCampaign) == 0 {
		return
	}
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	s.m.redisCalls.WithLabelValues("published").Inc()
	if err := s.deps.Campaigns.AddPublished(ctx, channel, byCampaign); err != nil {
		s.m.redisErrors.Inc()
		s.log.Warn("redis: campaigns' published counts not recorded", "channel", channel, "campaigns", len(byCampaign), "err", err)
	}
}

func (s *Server) tooMany(w http.ResponseWriter, tiers []quota.Tier, res quota.Result) {
	t := tiers[res.Refused]
	s.m.refusals.WithLabelValues(t.Name).Inc()
	// The detail says the Retry-After: the wait rounded up to whole
	// seconds, at least 1.
	after := max(seconds(res.Tiers[res.Refused].Wait), 1)
	w.Header().Set("Retry-After", strconv.FormatInt(after, 10))
	writeProblem(w, problem{
		Type: "https://iana.org/assignments/http-problem-types#quota-exceeded", Title: "Request cannot be satisfied as assigned quota has been exceeded",
		Status: http.StatusTooManyRequests, Tier: t.Name, ViolatedPolicies: []string{t.Name},
		Detail: fmt.Sprintf("quota %q exceeded; retry in %ds", t.Name, after),
	})
}

func (s *Server) serves(channel string) bool {
	for _, c := range s.cfg.Channels {
		if c == channel {
			return true
		}
	}
	return false
}

// partitionCount returns topic's partition count, creating the topic as
// `pacer publish` would when it is missing; cached once known (for the
// process's life: the last known count is used whatever Kafka answers
// later). Before it is known, it asks Kafka within ctx (the request's
// deadline) and, when the metadata cannot be read by then,
// returns Config.Partitions without caching it: the produce that follows,
// bounded by the same deadline, then fails or times out if Kafka is down.
func (s *Server) partitionCount(ctx context.Context, topic string) int {
	if n, ok := s.partitions.Load(topic); ok {
		return n.(int)
	}
	n, err := produce.EnsureTopic(ctx, s.deps.Kafka, topic, s.cfg.Partitions)
	if err != nil || n < 1 {
		return s.cfg.Partitions
	}
	s.partitions.Store(topic, n)
	return n
}

// bearer returns the token of an "Authorization: Bearer <token>" value.
func bearer(h string) (string, bool) {
	scheme, tok, ok := strings.Cut(h, " ")
	if !ok || !strings.EqualFold(scheme, "Bearer") {
		return "", false
	}
	tok = strings.TrimSpace(tok)
	return tok, tok != ""
}

// clientIP is the peer's address, or, when the peer is a trusted proxy,
// the right-most X-Forwarded-For address that is not itself trusted.
func (s *Server) clientIP(r *http.Request) netip.Addr {
	host, _, err := net.SplitHostPort(r.RemoteAddr)
	if err != nil {
		host = r.RemoteAddr
	}
	peer, err := netip.ParseAddr(host)
	if err != nil {
		return netip.IPv6Unspecified()
	}
	peer = peer.Unmap()
	if !s.trusted(peer) {
		return peer
	}
	hops := strings.Split(strings.Join(r.Header.Values("X-Forwarded-For"), ","), ",")
	for i := len(hops) - 1; i >= 0; i-- {
		a, err := netip.ParseAddr(strings.TrimSpace(hops[i]))
		if err != nil {
			break
		}
		if a = a.Unmap(); !s.trusted(a) {
			return a
		}
	}
	return peer
}

func (s *Server) trusted(a netip.Addr) bool {
	for _, p := range s.cfg.TrustedProxies {
		if p.Contains(a) {
			return true
		}
	}
	return false
}

// readBody reads the envelopes of r: one JSON object, or NDJSON lines.
// AcceptPost lists the request body types of a POST of messages, as the
// Accept-Post field of a 415 answers them.
const AcceptPost = "application/json, application/x-ndjson"

// bodyProblem is a request body refused, with the header fields to send.
type bodyProblem struct {
	problem
	header []string // name, value pairs
}

func bodyRefusal(p problem, h ...string) *bodyProblem { return &bodyProblem{p, h} }

// mediaType checks r's Content-Type and Content-Encoding: the media type
// must be application/json or application/x-ndjson (the request body types
// of openapi.yaml), with no charset or charset utf-8 (JSON is UTF-8, RFC
// 8259), and the body must not be content-coded. A missing Content-Type is
// refused too: the body's type is never guessed.
func mediaType(r *http.Request) (string, *bodyProblem) {
	unsupported := func(detail string) *bodyProblem {
		return bodyRefusal(problem{Type: "https://pacer.dev/problems/unsupported-media-type", Title: "Unsupported Media Type",
			Status: http.StatusUnsupportedMediaType, Detail: detail}, "Accept-Post", AcceptPost)
	}
	if ce := r.Header.Get("Content-Encoding"); ce != "" && !strings.EqualFold(ce, "identity") {
		p := unsupported(fmt.Sprintf("Content-Encoding %q: send the body uncompressed", ce))
		p.header = append(p.header, "Accept-Encoding", "identity")
		return "", p
	}
	want := fmt.Sprintf("send Content-Type application/json (one envelope) or application/x-ndjson (up to %d, one per line)", MaxBatch)
	ct := r.Header.Get("Content-Type")
	if ct == "" {
		return "", unsupported("no Content-Type: " + want)
	}
	mt, params, err := mime.ParseMediaType(ct)
	if err != nil {
		return "", unsupported(fmt.Sprintf("Content-Type %q is not a media type: %s", ct, want))
	}
	if mt != "application/json" && mt != "application/x-ndjson" {
		return "", unsupported(fmt.Sprintf("Content-Type %q: %s", mt, want))
	}
	if cs, ok := params["charset"]; ok && !strings.EqualFold(cs, "utf-8") {
		return "", unsupported(fmt.Sprintf("Content-Type %q: charset %q: the body must be UTF-8: %s, with charset utf-8 or none", ct, cs, want))
	}
	return mt, nil
}

func (s *Server) readBody(w http.ResponseWriter, r *http.Request, tenant *Tenant) ([]line, string, *bodyProblem) {
	mt, bp := mediaType(r)
	if bp != nil {
		return nil, "", bp
	}
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, MaxRequestBytes))
	if err != nil {
		var mbe *http.MaxBytesError
		if errors.As(err, &mbe) {
			return nil, "", bodyRefusal(problem{Type: "https://pacer.dev/problems/too-large", Title: "Content Too Large", Status: http.StatusRequestEntityTooLarge,
				Detail: fmt.Sprintf("a request body may have at most %d bytes", MaxRequestBytes)})
		}
		return nil, "", bodyRefusal(problem{Type: "https://pacer.dev/problems/bad-body", Title: "Bad Request", Status: http.StatusBadRequest, Detail: "reading the body: " + err.Error()})
	}
	var raw [][]byte
	if mt == "application/json" {
		raw = [][]byte{body}
	} else {
		for _, b := range bytes.Split(body, []byte("\n")) {
			if len(bytes.TrimSpace(b)) == 0 {
				raw = append(raw, nil) // keeps line numbers
				continue
			}
			raw = append(raw, b)
		}
	}
	var lines []line
	for i, b := range raw {
		if b == nil {
			continue
		}
		if len(b) > MaxEnvelopeBytes {
			return nil, "", bodyRefusal(problem{Type: "https://pacer.dev/problems/too-large", Title: "Content Too Large", Status: http.StatusRequestEntityTooLarge,
				Detail: fmt.Sprintf("line %d: an envelope may have at most %d bytes", i+1, MaxEnvelopeBytes)})
		}
		lines = append(lines, line{n: i + 1, value: b})
	}
	if len(lines) == 0 {
		return nil, "", bodyRefusal(problem{Type: "https://pacer.dev/problems/invalid-envelope", Title: "Invalid envelope", Status: http.StatusBadRequest,
			Detail: "the body holds no envelope", InvalidParams: []invalidParam{{Name: "body", Reason: "empty"}}})
	}
	if len(lines) > MaxBatch {
		return nil, "", bodyRefusal(problem{Type: "https://pacer.dev/problems/too-many-envelopes", Title: "Content Too Large", Status: http.StatusRequestEntityTooLarge,
			Detail: fmt.Sprintf("%d envelopes: at most %d per request", len(lines), MaxBatch)})
	}
	member, _ := json.Marshal(tenant.ID)
	member = append(append([]byte(`{"tenant":`), member...), ',')
	for i := range lines {
		l := &lines[i]
		env, err := envelope.Parse(l.value)
		if err == nil {
			err = envelope.CheckCampaign(env.Campaign)
		}
		if err != nil {
			l.err = envelopeError(err)
			l.env.ID = envelope.PeekID(l.value) // named in the rejection, if it has one
			continue
		}
		if env.Tenant != "" && env.Tenant != tenant.ID {
			l.err = &envelope.Error{Field: "tenant", Problem: "must be omitted or the API key's tenant (the tenant is set from the key)"}
			l.env.ID = env.ID
			continue
		}
		v, err := withTenant(l.value, env, tenant.ID, member)
		if err != nil {
			l.err = &envelope.Error{Problem: "cannot be re-encoded: " + err.Error()}
			l.env.ID = env.ID
			continue
		}
		env.Tenant = tenant.ID
		l.env, l.value = env, v
	}
	sum := sha256.Sum256(body)
	return lines, hex.EncodeToString(sum[:]), nil
}

// withTenant returns the record value of envelope line raw (which
// envelope.Parse accepted as env) with its tenant set to id: raw
// itself when it names id already; raw with member (`{"tenant":"<id>",`)
// in place of its "{" when raw cannot hold a tenant member at all (neither
// the word tenant nor a \u escape, which could spell it, occurs in it), so
// the result has no duplicate member; else env re-encoded with the tenant.
// Splicing spares the re-encoding of every envelope of a batch.
func withTenant(raw []byte, env envelope.Envelope, id string, member []byte) ([]byte, error) {
	raw = bytes.TrimSpace(raw)
	if env.Tenant == id {
		return raw, nil
	}
	if !bytes.Contains(raw, []byte("tenant")) && !bytes.Contains(raw, []byte(`\u`)) {
		return append(append(make([]byte, 0, len(member)+len(raw)-1), member...), raw[1:]...), nil
	}
	env.Tenant = id
	return json.Marshal(env)
}

func envelopeError(err error) *envelope.Error {
	var ee *envelope.Error
	if errors.As(err, &ee) {
		return ee
	}
	return &envelope.Error{Problem: err.Error()}
}

// WholeEnvelope is the field a rejected line names (Rejected.Field, and a
// 400's invalid-params name) when the fault is in the line as a whole
// rather than in one field: it is not a JSON object, or not valid JSON.
const WholeEnvelope = "envelope"

// fieldOf returns the field e names, or [WholeEnvelope] when it names none.
func fieldOf(e *envelope.Error) string {
	if e.Field == "" {
		return WholeEnvelope
	}
	return e.Field
}

type statusWriter struct {
	http.ResponseWriter
	status int
}

func (w *statusWriter) WriteHeader(code int) {
	if w.status == 0 {
		w.status = code
	}
	w.ResponseWriter.WriteHeader(code)
}

func (w *statusWriter) Write(b []byte) (int, error) {
	if w.status == 0 {
		w.status = http.StatusOK
	}
	return w.ResponseWriter.Write(b)
}
