package main

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/pprof"
	"strings"
	"sync/atomic"
	"time"

	"github.com/pacerhq/pacer/bucket"
	"github.com/pacerhq/pacer/bucket/adapt"
	"github.com/pacerhq/pacer/pacer/consumer"
	"github.com/pacerhq/pacer/pacer/control"
	"github.com/pacerhq/pacer/pacer/ledger"
	"github.com/pacerhq/pacer/pacer/portfolio"
	"github.com/pacerhq/pacer/pacer/statuspage"
	"github.com/pacerhq/pacer/pacer/suppress"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/redis/go-redis/v9"
	"github.com/twmb/franz-go/pkg/kgo"
)

func cmdRun(ctx context.Context, args []string, stdout, stderr io.Writer, lookup func(string) (string, bool)) error {
	fs := flag.NewFlagSet("pacer run", flag.ContinueOnError)
	fs.SetOutput(stderr)
	channel := fs.String("channel", "", "channel to pace: "+channelList()+" (required)")
	topic := fs.String("topic", "", "topic to consume (default pacer.<channel>)")
	group := fs.String("group", "", "consumer group (default pacer-<channel>)")
	fs.Usage = func() {
		fmt.Fprintln(stderr, "usage: pacer run --channel C [--topic T] [--group G]")
		fs.PrintDefaults()
		ch, _ := channelNamed(*channel)
		fmt.Fprint(stderr, settingsHelp(ch))
	}
	ch, err := parseChannelFlags(fs, args, channel)
	if err != nil {
		return err
	}
	if *topic != "" {
		if err := checkTopic("topic", *topic); err != nil {
			return err
		}
	}
	cfg, err := loadConfig(lookup, ch)
	if err != nil {
		return fmt.Errorf("%w: %w", errConfig, err)
	}
	log := newLogger(cfg, stderr)
	vars := cfg.channels[ch.name].vars
	vars.log = log
	sender, err := ch.sender(ctx, vars)
	if err != nil {
		return err
	}
	pc := cfg.pacerConfig(ch)
	pc.Topic, pc.Group, pc.Logger, pc.RedisName = *topic, *group, log, redisSetting(cfg)
	kopts, err := kafkaOpts(cfg)
	if err != nil {
		return err
	}

	ln, err := listenSetting("PACER_METRICS_ADDR", cfg.MetricsAddr)
	if err != nil {
		return err
	}
	defer ln.Close()
	auth, err := pageAuth(cfg, log)
	if err != nil {
		return fmt.Errorf("%w: %w", errConfig, err)
	}
	var pageLn net.Listener // nil: the status page is on the metrics listener
	if cfg.PageAddr != "" {
		if pageLn, err = listenSetting("PACER_PAGE_ADDR", cfg.PageAddr); err != nil {
			return err
		}
		defer pageLn.Close()
	}
	rdb, err := newRedis(cfg)
	if err != nil {
		return err
	}
	defer rdb.Close()
	trips := &roundTrips{}
	rdb.AddHook(trips)
	lim := bucket.New(rdb, bucket.Config{Prefix: cfg.RedisPrefix})
	redis.SetLogger(redisLogger{log})
	lctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	err = lim.Load(lctx)
	cancel()
	if r := redisRefusal(err); r != "" {
		// Credentials or certificates: waiting cannot help.
		return fmt.Errorf("redis: %s: %w", r, err)
	}
	if err != nil {
		// Not fatal: the pacer stays not-ready and retries until Redis answers.
		attrs := []any{"err", err}
		if h := redisHint(cfg, err); h != "" {
			attrs = append(attrs, "hint", h)
		}
		log.Warn("redis not reachable at start-up; sends wait until it is", attrs...)
	}

	// Per-key limits and campaign controls set at run time (pacer limit,
	// pacer campaign) live in Redis under the limiter's key names.
	ctl := control.New(rdb, lim.Keys())
	base := control.KeyPolicy{Limit: pc.Limit, RecipientLimit: pc.RecipientLimit, AIMD: pc.AIMD, Breaker: pc.Breaker}
	policy := control.OverridePolicy{Base: base, Channel: ch.name, Store: ctl}
	// The ledger's claims and delivered marks go to Redis in one pipeline
	// per PACER_LEDGER_FLUSH; those still waiting at exit are written then.
	// The campaigns' counts go with the marks of their records, in the same
	// flush, so a crash leaves the counters as it leaves the ledger.
	var failTo atomic.Pointer[consumer.Pacer] // set below; the ledger reports its failures to it
	led := ledger.NewBatcher(rdb, lim.Keys(), ledger.BatchConfig{FlushInterval: cfg.LedgerFlush, TTL: cfg.LedgerTTL,
		Count: consumer.CampaignCounts(ctl, ch.name),
		OnError: func(err error) {
			if p := failTo.Load(); p != nil {
				p.LedgerWriteFailed(err)
			} else {
				log.Warn("idempotency ledger: write failed; tried again", "err", err)
			}
		}})
	defer func() {
		cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), cfg.Drain)
		defer cancel()
		if err := led.Close(cctx); err != nil {
			log.Error("idempotency ledger: marks not written at exit; their records read as unknown outcome if delivered again", "err", err)
		}
	}()
	var sup *suppress.Store // PACER_SUPPRESS=false: none
	if cfg.Suppress {
		sup = suppress.NewStore(rdb, lim.Keys())
	}
	var port *portfolio.Store // WhatsApp's messaging limit: keys set in a portfolio are guarded
	if ch.name == "whatsapp" {
		port = portfolio.NewStore(rdb, lim.Keys()).WithWindow(cfg.guardWindow())
	}
	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}), trips.collector(ch.name))
	reg.MustRegister(connMetrics(ch)...)
	outs, closeOutcomes, err := newOutcomeWriter(ctx, cfg, ch.name, kopts, log, reg)
	if err != nil {
		return err
	}
	defer func() { closeOutcomes(cfg.Drain) }()
	p, err := consumer.New(pc, append(kopts, kgo.ClientID("pacer-"+ch.name),
		kgo.SessionTimeout(cfg.KafkaSessionTimeout), kgo.HeartbeatInterval(min(3*time.Second, cfg.KafkaSessionTimeout/3))),
		consumer.Deps{Bucket: lim, Adapter: adapt.New(rdb, bucket.Config{Prefix: cfg.RedisPrefix}), Ledger: led, Sender: sender,
			Fallback:  bucket.NewLocal(bucket.LocalConfig{Replicas: cfg.ExpectedReplicas}),
			RedisPing: func(ctx context.Context) error { return rdb.Ping(ctx).Err() },
			Policy:    policy, Campaigns: ctl, Suppress: sup, Portfolios: port, Outcomes: outs}, reg)
	if err != nil {
		return fmt.Errorf("%w: %w", errConfig, err)
	}
	failTo.Store(p)

	// The channel's limit is recorded for `pacer status` once this pacer
	// has started (its topics checked, consuming), and kept fresh while it
	// runs: a run that fails its start-up checks records nothing.
	runCtx, stopRun := context.WithCancel(ctx)
	defer stopRun()
	go func() {
		select {
		case <-p.Started():
			keepLimit(runCtx, rdb, cfg.RedisPrefix, ch.name, pc.Limit, log, limitRefresh, limitTTL)
		case <-runCtx.Done():
		}
	}()
	go publishBacklog(ctx, rdb, cfg.RedisPrefix, ch.name, p.Owner(), p, log)
	// The status page: this replica publishes its active keys, and its page
	// shows every replica's, with each key's limit as set at run time.
	scfg := statuspage.Config{Channel: ch.name, Prefix: cfg.RedisPrefix, Logger: log, Policy: policy, HistoryKeys: cfg.StatusHistoryKeys, Overloaded: p.Overloaded}
	go statuspage.NewPublisher(rdb, scfg, activeKeys(p)).Run(ctx)
	// Reading it and acting from it need the credentials of
	// PACER_PAGE_*; on PACER_PAGE_ADDR it has a listener of its own.
	topicName := cmp.Or(*topic, "pacer."+ch.name)
	page := statusPage(rdb, scfg, auth, ctl, topicName, kopts, log, reg)
	var extra []func(*http.ServeMux)
	if pageLn == nil {
		extra = append(extra, page)
	} else {
		mux := http.NewServeMux()
		page(mux)
		psrv := &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second}
		go psrv.Serve(pageLn)
		defer psrv.Close()
		log.Info("status page listening", "addr", pageLn.Addr().String())
	}
	if cfg.Pprof {
		extra = append(extra, registerPprof)
	}
	srv := &http.Server{Handler: opsHandler(reg, p.Ready, extra...), ReadHeaderTimeout: 5 * time.Second}
	go srv.Serve(ln)
	defer srv.Close()
	log.Info("metrics listening", "addr", ln.Addr().String())

	err = p.Run(ctx)
	var ke *consumer.KafkaError
	if errors.As(err, &ke) {
		if ke.After == 0 { // refused at once: the cause names the setting
			return kafkaCommandFailure(cfg, err)
		}
		return fmt.Errorf("%w (PACER_KAFKA_BROKERS=%s; the wait is PACER_KAFKA_STARTUP_TIMEOUT)", err, strings.Join(cfg.KafkaBrokers, ","))
	}
	return err
}

// opsHandler serves /metrics, /healthz (the process is alive), /readyz
// (consuming and Redis answering) and what each of extra registers (the
// status page).
func opsHandler(reg *prometheus.Registry, ready func() bool, extra ...func(*http.ServeMux)) http.Handler {
	mux := http.NewServeMux()
	for _, add := range extra {
		add(mux)
	}
	mux.Handle("GET /metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{Registry: reg}))
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) { io.WriteString(w, "ok\n") })
	mux.HandleFunc("GET /readyz", func(w http.ResponseWriter, _ *http.Request) {
		if !ready() {
			http.Error(w, "not ready", http.StatusServiceUnavailable)
			return
		}
		io.WriteString(w, "ready\n")
	})
	// GET (and HEAD) only, as on `pacer ingest`'s ops paths: another
	// method is a 405 problem+json naming what is allowed.
	for _, p := range []string{"/metrics", "/healthz", "/readyz"} {
		mux.HandleFunc(p, opsNotAllowed)
	}
	return mux
}

// opsNotAllowed answers a method other than GET or HEAD on an ops path:
// 405, Allow, and an RFC 9457 problem naming the method and the path.
func opsNotAllowed(w http.ResponseWriter, r *http.Request) {
	w.Header().Set("Allow", "GET, HEAD")
	w.Header().Set("Content-Type", "application/problem+json")
	w.WriteHeader(http.StatusMethodNotAllowed)
	json.NewEncoder(w).Encode(map[string]any{"type": "about:blank", "title": "Method Not Allowed", "status": http.StatusMethodNotAllowed,
		"detail": fmt.Sprintf("%s is not allowed on %s; allowed: GET, HEAD", r.Method, r.URL.Path)})
}

// registerPprof serves Go's runtime profiles under /debug/pprof/
// (PACER_PPROF): CPU, heap, goroutines, for finding where a process's time
// goes. They name no secret, but show the code's layout: off by default.
func registerPprof(mux *http.ServeMux) {
	mux.HandleFunc("/debug/pprof/", pprof.Index)
	mux.HandleFunc("/debug/pprof/cmdline", pprof.Cmdline)
	mux.HandleFunc("/debug/pprof/profile", pprof.Profile)
	mux.HandleFunc("/debug/pprof/symbol", pprof.Symbol)
	mux.HandleFunc("/debug/pprof/trace", pprof.Trace)
}

func newLogger(cfg config, w io.Writer) *slog.Logger {
	lvl, _ := parseLevel(cfg.LogLevel)
	o := &slog.HandlerOptions{Level: lvl, ReplaceAttr: func(_ []string, a slog.Attr) slog.Attr {
		if a.Value.Kind() == slog.KindDuration {
			a.Value = slog.StringValue(a.Value.Duration().String()) // "1.5s", not nanoseconds
		}
		return a
	}}
	if cfg.LogFormat == "text" {
		return slog.New(slog.NewTextHandler(w, o))
	}
	return slog.New(slog.NewJSONHandler(w, o))
}

// redisLogger routes go-redis's internal messages (pool dial failures) to
// slog at debug level; the pacer logs Redis trouble itself, once per outage.
type redisLogger struct{ log *slog.Logger }

func (l redisLogger) Printf(_ context.Context, format string, v ...any) {
	l.log.Debug(fmt.Sprintf(format, v...), "component", "go-redis")
}

// activeKeys reads p's active keys, each with its backlog as `pacer
// status` has it, for a status page publisher, reusing the slices between
// readings (100,000 keys every 5 s make no garbage).
func activeKeys(p *consumer.Pacer) func(dst []statuspage.KeyActivity) []statuspage.KeyActivity {
	var acts []consumer.KeyActivity
	var ks []consumer.KeyStatus
	return func(dst []statuspage.KeyActivity) []statuspage.KeyActivity {
		ks, acts = p.AppendKeyStatus(ks[:0], acts)
		for _, k := range ks {
			dst = append(dst, statuspage.KeyActivity(k))
		}
		return dst
	}
}
