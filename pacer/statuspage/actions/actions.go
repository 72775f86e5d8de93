// Package actions lets operators act from the status page, safely: who
// may read the page's data and who may act (bearer tokens of credential
// files, [Auth]), and the JSON API the page's buttons call, each action
// going through package operate as the commands do:
//
//	GET  /status                     the page (static HTML, no data): anyone
//	GET  /status.json                the data: a viewer or an operator (anyone when reading is open)
//	GET  /status/api/whoami          {"name", "role", "actions", "open_read"} of the request's token
//	POST /status/api/campaign/pause  {"campaign": "spring", "force": false}; also resume, cancel
//	POST /status/api/limit/set       {"key": "106", "rate": 20, "burst": 5} (burst optional: the channel's)
//	POST /status/api/limit/unset     {"key": "106"}
//	GET  /status/api/dlq             ?reason=&campaign=&key=&n= : the DLQ records matching, n at most (default 100, at most 1000)
//	GET  /status/api/dlq/record      ?partition=&offset= : one DLQ record with its envelope, reason, detail and attempts
//	POST /status/api/dlq/replay      {"records": [{"partition": 0, "offset": 12}], "reason", "campaign", "key"}
//
// Every /status/api path but whoami needs an operator's token: none is
// 401, a viewer's 403, and with no operator configured every action is
// 403 (actions are off). Actions are POST with the token in the
// Authorization header, never a cookie, so another site cannot make a
// browser act (no CSRF); a GET of an action's path is 405. The DLQ is
// read by operators only: envelopes carry recipients and message bodies.
//
// Every action is logged at INFO by package operate with by (the
// credential's name), the old and the new value; a refused one at WARN
// with the name and role that tried. A token no file lists is logged at
// WARN with the remote address and the path (never the token), once a
// second per address at most, and counted in pacer_page_refused_total. Bad input is a 400 problem+json
// (RFC 9457) whose invalid-params name the field.
package actions

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"reflect"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/pacerhq/pacer/pacer/control"
	"github.com/pacerhq/pacer/pacer/operate"
	"github.com/pacerhq/pacer/pacer/produce"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/twmb/franz-go/pkg/kgo"
)

// Bounds of the DLQ answers.
const (
	DefaultDLQRows = 100
	MaxDLQRows     = 1000
	MaxReplay      = 1000 // records one replay may name
	maxBody        = 64 << 10
)

// Config is what the actions act on.
type Config struct {
	Channel string         // the channel of this process; required
	Topic   string         // its main topic (the DLQ is Topic + ".dlq"); required for the DLQ actions
	Control *control.Store // campaign states and key limits; required
	// Kafka returns a new client for one DLQ request (closed after it):
	// not a group consumer, with a manual partitioner. nil: the DLQ
	// actions answer 503.
	Kafka  func() (*kgo.Client, error)
	Auth   *Auth        // required
	Logger *slog.Logger // default slog.Default()
	// Metrics, if set, registers pacer_page_refused_total{reason}.
	Metrics prometheus.Registerer
	Now     func() time.Time // the clock of the refusal log's rate limit; default time.Now
}

// API serves the actions. It is safe for concurrent use.
type API struct {
	cfg     Config
	dlqMu   sync.Mutex // one DLQ reading at a time per process
	refused *prometheus.CounterVec

	logMu     sync.Mutex
	lastLog   map[string]time.Time // remote address: when its last refusal was logged
	sinceLast map[string]int       // remote address: refusals not logged since
}

// Refusal reasons, the reason label of pacer_page_refused_total.
const (
	RefusedUnknownToken = "unknown-token" // a bearer token no credentials file lists
	RefusedNotOperator  = "not-operator"  // a viewer's token on an action
)

// refusalLogEvery is how often at most a refused token of one remote
// address is logged; the refusals between are counted in the next line.
const refusalLogEvery = time.Second

// New returns the API of cfg.
func New(cfg Config) *API {
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	if cfg.Auth == nil || cfg.Control == nil || cfg.Channel == "" {
		panic("actions: Config.Auth, Control and Channel are required")
	}
	a := &API{cfg: cfg, lastLog: map[string]time.Time{}, sinceLast: map[string]int{},
		refused: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "pacer_page_refused_total",
			Help: "Status page requests refused for their credential, by reason: unknown-token, not-operator."}, []string{"reason"})}
	for _, r := range []string{RefusedUnknownToken, RefusedNotOperator} {
		a.refused.WithLabelValues(r)
	}
	if cfg.Metrics != nil {
		cfg.Metrics.MustRegister(a.refused)
	}
	return a
}

// badToken counts and logs at WARN a request refused for a token no file
// lists: its remote address, method, path and the problem, never the
// token. One line per remote address per refusalLogEvery at most, with
// the refusals not logged since (suppressed), so a flood does not flood
// the log.
func (a *API) badToken(r *http.Request, err error) {
	a.refused.WithLabelValues(RefusedUnknownToken).Inc()
	remote := r.RemoteAddr
	if host, _, herr := net.SplitHostPort(remote); herr == nil {
		remote = host
	}
	now := a.cfg.Now()
	a.logMu.Lock()
	if last, ok := a.lastLog[remote]; ok && now.Sub(last) < refusalLogEvery {
		a.sinceLast[remote]++
		a.logMu.Unlock()
		return
	}
	if len(a.lastLog) >= 10_000 { // bound the memory of a flood from many addresses
		clear(a.lastLog)
		clear(a.sinceLast)
	}
	suppressed := a.sinceLast[remote]
	a.lastLog[remote] = now
	delete(a.sinceLast, remote)
	a.logMu.Unlock()
	a.cfg.Logger.Warn("status page token refused", "remote", remote, "method", r.Method, "path", r.URL.Path, "problem", err.Error(), "suppressed", suppressed)
}

// Mount registers the page, its data and the actions on mux: page serves
// the page's own GET /status and GET /status.json (statuspage.Page's
// Register), and /status.json is served only to a request allowed to read.
// Every other answer under /status/api/ is problem+json too: a known path
// with another method is 405 with Allow, an unknown path 404 naming it.
func (a *API) Mount(mux *http.ServeMux, page http.Handler) {
	mux.Handle("GET /status", page)
	mux.Handle("GET /status.json", a.reader(page))
	allow := map[string]string{}
	handle := func(method, path string, h http.Handler) {
		allow[path] = method
		mux.Handle(method+" "+path, h)
	}
	handle("GET", "/status/api/whoami", http.HandlerFunc(a.whoami))
	for _, verb := range []string{"pause", "resume", "cancel"} {
		handle("POST", "/status/api/campaign/"+verb, a.operator(a.campaign(verb)))
	}
	handle("POST", "/status/api/limit/set", a.operator(http.HandlerFunc(a.limitSet)))
	handle("POST", "/status/api/limit/unset", a.operator(http.HandlerFunc(a.limitUnset)))
	handle("GET", "/status/api/dlq", a.operator(http.HandlerFunc(a.dlqList)))
	handle("GET", "/status/api/dlq/record", a.operator(http.HandlerFunc(a.dlqRecord)))
	handle("POST", "/status/api/dlq/replay", a.operator(http.HandlerFunc(a.dlqReplay)))
	// The patterns above are more specific than this one, which gets
	// only what none of them serves.
	mux.HandleFunc("/status/api/", func(w http.ResponseWriter, r *http.Request) {
		method, ok := allow[r.URL.Path]
		if !ok {
			writeProblem(w, http.StatusNotFound, fmt.Sprintf("%s is not a path of the status page's API", r.URL.Path))
			return
		}
		if method == "GET" {
			method = "GET, HEAD"
		}
		w.Header().Set("Allow", method)
		writeProblem(w, http.StatusMethodNotAllowed, fmt.Sprintf("%s %s: this path answers %s only", r.Method, r.URL.Path, method))
	})
}

// problem is an RFC 9457 problem details object.
type problem struct {
	Type          string         `json:"type"`
	Title         string         `json:"title"`
	Status        int            `json:"status"`
	Detail        string         `json:"detail,omitempty"`
	InvalidParams []invalidParam `json:"invalid-params,omitempty"` // the bad fields (400)
}

type invalidParam struct {
	Name   string `json:"name"`
	Reason string `json:"reason"`
}

func writeProblem(w http.ResponseWriter, status int, detail string, params ...invalidParam) {
	h := w.Header()
	h.Set("Content-Type", "application/problem+json")
	h.Set("Cache-Control", "no-store")
	if status == http.StatusUnauthorized {
		h.Set("WWW-Authenticate", `Bearer realm="pacer status page"`)
	}
	w.WriteHeader(status)
	json.NewEncoder(w).Encode(problem{Type: "about:blank", Title: http.StatusText(status), Status: status, Detail: detail, InvalidParams: params})
}

func writeJSON(w http.ResponseWriter, v any) {
	h := w.Header()
	h.Set("Content-Type", "application/json")
	h.Set("Cache-Control", "no-store")
	json.NewEncoder(w).Encode(v)
}

// badField answers 400 naming field.
func badField(w http.ResponseWriter, field, reason string) {
	writeProblem(w, http.StatusBadRequest, field+" "+reason, invalidParam{field, reason})
}

// reader serves next to a request allowed to read: any known credential,
// or none when reading is open; 401 otherwise.
func (a *API) reader(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _, err := a.cfg.Auth.identify(r)
		if err != nil && !errors.Is(err, errNoToken) {
			a.badToken(r, err)
		}
		if err != nil && !(errors.Is(err, errNoToken) && a.cfg.Auth.OpenRead()) {
			writeProblem(w, http.StatusUnauthorized, "reading the status needs a viewer's or an operator's token: "+err.Error())
			return
		}
		next.ServeHTTP(w, r)
	})
}

type byKey struct{}

// operator serves next to an operator's request, with the credential's
// name in its context; 403 when actions are off or for a viewer, 401
// without a known token.
func (a *API) operator(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if !a.cfg.Auth.Actions() {
			writeProblem(w, http.StatusForbidden, "actions are off on this process: no operator is configured")
			return
		}
		name, role, err := a.cfg.Auth.identify(r)
		if err != nil {
			if !errors.Is(err, errNoToken) {
				a.badToken(r, err)
			}
			writeProblem(w, http.StatusUnauthorized, "acting needs an operator's token: "+err.Error())
			return
		}
		if role != Operator {
			a.refused.WithLabelValues(RefusedNotOperator).Inc()
			a.cfg.Logger.Warn("status page action refused", "by", name, "role", role.String(), "method", r.Method, "path", r.URL.Path)
			writeProblem(w, http.StatusForbidden, fmt.Sprintf("%s %q may read the status but not act: acting needs an operator's token", role, name))
			return
		}
		next.ServeHTTP(w, r.WithContext(context.WithValue(r.Context(), byKey{}, name)))
	})
}

// by returns the operator's name of r (set by operator).
func by(r *http.Request) string { s, _ := r.Context().Value(byKey{}).(string); return s }

func (a *API) whoami(w http.ResponseWriter, r *http.Request) {
	name, role, err := a.cfg.Auth.identify(r)
	if err != nil && !errors.Is(err, errNoToken) {
		a.badToken(r, err)
		writeProblem(w, http.StatusUnauthorized, err.Error())
		return
	}
	writeJSON(w, map[string]any{"name": name, "role": role.String(), "actions": a.cfg.Auth.Actions(), "open_read": a.cfg.Auth.OpenRead()})
}

// decode reads r's JSON body, one JSON object and nothing after it, into
// v: 400 naming the problem (an unknown field by name, a field of the
// wrong type by name, "body" for anything else) and false when it cannot.
// The answer names JSON's types, never Go's.
func decode(w http.ResponseWriter, r *http.Request, v any) bool {
	dec := json.NewDecoder(http.MaxBytesReader(w, r.Body, maxBody))
	dec.DisallowUnknownFields()
	dec.UseNumber()
	if err := dec.Decode(v); err != nil {
		var ute *json.UnmarshalTypeError
		var mbe *http.MaxBytesError
		switch {
		case errors.As(err, &ute) && ute.Field != "":
			badField(w, ute.Field, "must be "+jsonType(ute.Type))
		case errors.As(err, &ute):
			badField(w, "body", "must be a JSON object")
		case errors.As(err, &mbe):
			badField(w, "body", fmt.Sprintf("must be at most %d bytes", maxBody))
		case errors.Is(err, io.EOF):
			badField(w, "body", "is empty: send a JSON object")
		case strings.HasPrefix(err.Error(), "json: unknown field "):
			badField(w, "body", "has an "+strings.TrimPrefix(err.Error(), "json: ")+": see the fields of this path in docs/operations.md")
		default:
			badField(w, "body", "is not JSON: "+strings.TrimPrefix(err.Error(), "json: "))
		}
		return false
	}
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		badField(w, "body", "must be one JSON object with nothing after it")
		return false
	}
	return true
}

// jsonType names t's JSON type for an error: "a string", "a number"...
func jsonType(t reflect.Type) string {
	switch t.Kind() {
	case reflect.String:
		if t == reflect.TypeFor[json.Number]() {
			return "a number"
		}
		return "a string"
	case reflect.Bool:
		return "true or false"
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64, reflect.Uint, reflect.Uint8, reflect.Uint16,
		reflect.Uint32, reflect.Uint64, reflect.Float32, reflect.Float64:
		return "a number"
	case reflect.Slice, reflect.Array:
		return "a list"
	}
	return "a JSON object"
}

// number returns the text of the JSON number raw ("" when absent or
// null); false, after answering 400 naming field, when raw is another
// JSON type (a string "20" is not the number 20).
func number(w http.ResponseWriter, field string, raw json.RawMessage) (string, bool) {
	s := strings.TrimSpace(string(raw))
	if s == "" || s == "null" {
		return "", true
	}
	if _, err := strconv.ParseFloat(s, 64); err != nil || !json.Valid(raw) {
		badField(w, field, "must be a number")
		return "", false
	}
	return s, true
}

// failed answers err of an action: a refused field 400, anything else
// (Redis, Kafka) 503.
func (a *API) failed(w http.ResponseWriter, r *http.Request, err error) {
	if fe, ok := operate.IsFieldError(err); ok {
		badField(w, fe.Field, fe.Problem)
		return
	}
	a.cfg.Logger.Error("status page action failed", "by", by(r), "path", r.URL.Path, "err", err)
	writeProblem(w, http.StatusServiceUnavailable, err.Error())
}

func (a *API) campaign(verb string) http.Handler {
	want := map[string]control.State{"pause": control.Paused, "resume": control.Running, "cancel": control.Cancelled}[verb]
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var req struct {
			Campaign string `json:"campaign"`
			Force    bool   `json:"force"`
		}
		if !decode(w, r, &req) {
			return
		}
		ctx, cancel := context.WithTimeout(r.Context(), 10*time.Second)
		defer cancel()
		old, err := operate.SetCampaignState(ctx, a.cfg.Control, a.cfg.Logger, by(r), a.cfg.Channel, req.Campaign, want, req.Force)
		if errors.Is(err, operate.ErrUnknownCampaign) {
			badField(w, "campaign", fmt.Sprintf("%q of %s is not known (nothing published, sent or set for it): check the name, or send \"force\": true to set the state of a campaign not yet published", req.Campaign, a.cfg.Channel))
			return
		}
		if err != nil {
			a.failed(w, r, err)
			return
		}
		writeJSON(w, map[string]string{"channel": a.cfg.Channel, "campaign": req.Campaign, "old": operate.StateName(old), "new": operate.StateName(want)})
	})
}

// limitJSON is a key's limit in an answer; null when the channel's
// applies.
type limitJSON struct {
	Rate  float64 `json:"rate"`  // msgs/s
	Burst *int    `json:"burst"` // messages; null: the channel's
}

func limitOf(l control.KeyLimit, had bool) *limitJSON {
	if !had {
		return nil
	}
	out := &limitJSON{Rate: l.PerSecond}
	if l.Burst > 0 {
		out.Burst = &l.Burst
	}
	return out
}

func (a *API) limitSet(w http.ResponseWriter, r *http.Request) {
	var req struct {
		Key   string          `json:"key"`
		Rate  json.RawMessage `json:"rate"`
		Burst json.RawMessage `json:"burst"`
	}
	if !decode(w, r, &req) {
		return
	}
	rate, ok := number(w, "rate", req.Rate)
	if !ok {
		return
	}
	burst, ok := number(w, "burst", req.Burst)
	if !ok {
		return
	}
	kl, err := operate.ParseLimit(req.Key, rate, burst)
	if err != nil {
		a.failed(w, r, err)
		return
	}
	ctx, cancel := context.WithTimeout(r.Context(), 10*time.Second)
	defer cancel()
	old, had, err := operate.SetLimit(ctx, a.cfg.Control, a.cfg.Logger, by(r), a.cfg.Channel, kl)
	if err != nil {
		a.failed(w, r, err)
		return
	}
	writeJSON(w, map[string]any{"channel": a.cfg.Channel, "key": kl.Key, "old": limitOf(old, had), "new": limitOf(kl, true)})
}

func (a *API) limitUnset(w http.ResponseWriter, r *http.Request) {
	var req struct {
		Key string `json:"key"`
	}
	if !decode(w, r, &req) {
		return
	}
	ctx, cancel := context.WithTimeout(r.Context(), 10*time.Second)
	defer cancel()
	old, had, err := operate.UnsetLimit(ctx, a.cfg.Control, a.cfg.Logger, by(r), a.cfg.Channel, req.Key)
	if err != nil {
		a.failed(w, r, err)
		return
	}
	writeJSON(w, map[string]any{"channel": a.cfg.Channel, "key": req.Key, "old": limitOf(old, had), "new": nil})
}

// withKafka runs f with a new Kafka client, one DLQ request at a time,
// within a minute; it answers 503 itself when there is no client, 404
// when the DLQ does not exist.
func (a *API) withKafka(w http.ResponseWriter, r *http.Request, f func(ctx context.Context, cl *kgo.Client) error) {
	if a.cfg.Kafka == nil || a.cfg.Topic == "" {
		writeProblem(w, http.StatusServiceUnavailable, "the DLQ cannot be read from this process: no Kafka client")
		return
	}
	a.dlqMu.Lock()
	defer a.dlqMu.Unlock()
	cl, err := a.cfg.Kafka()
	if err != nil {
		a.failed(w, r, err)
		return
	}
	defer cl.Close()
	ctx, cancel := context.WithTimeout(r.Context(), time.Minute)
	defer cancel()
	err = f(ctx, cl)
	switch {
	case err == nil:
	case errors.Is(err, operate.ErrNoDLQ), errors.Is(err, operate.ErrNotFound):
		writeProblem(w, http.StatusNotFound, err.Error())
	default:
		a.failed(w, r, err)
	}
}

func (a *API) dlqList(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	f := operate.DLQFilter{Reason: q.Get("reason"), Campaign: q.Get("campaign"), Key: q.Get("key")}
	if err := f.Check(); err != nil {
		a.failed(w, r, err)
		return
	}
	n := DefaultDLQRows
	if v := q.Get("n"); v != "" {
		var err error
		if n, err = strconv.Atoi(v); err != nil || n < 1 || n > MaxDLQRows {
			badField(w, "n", fmt.Sprintf("%q must be a number of records, 1..%d", v, MaxDLQRows))
			return
		}
	}
	a.withKafka(w, r, func(ctx context.Context, cl *kgo.Client) error {
		l, err := operate.ListDLQ(ctx, cl, a.cfg.Topic, f, n)
		if err != nil {
			return err
		}
		writeJSON(w, l)
		return nil
	})
}

func (a *API) dlqRecord(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	p, err := strconv.ParseInt(q.Get("partition"), 10, 32)
	if err != nil || p < 0 {
		badField(w, "partition", fmt.Sprintf("%q must be a partition number >= 0", q.Get("partition")))
		return
	}
	o, err := strconv.ParseInt(q.Get("offset"), 10, 64)
	if err != nil || o < 0 {
		badField(w, "offset", fmt.Sprintf("%q must be an offset >= 0", q.Get("offset")))
		return
	}
	a.withKafka(w, r, func(ctx context.Context, cl *kgo.Client) error {
		rec, err := operate.ShowDLQ(ctx, cl, a.cfg.Topic, produce.Position{Partition: int32(p), Offset: o})
		if err != nil {
			return err
		}
		writeJSON(w, rec)
		return nil
	})
}

func (a *API) dlqReplay(w http.ResponseWriter, r *http.Request) {
	var req struct {
		Records []produce.Position `json:"records"`
		operate.DLQFilter
	}
	if !decode(w, r, &req) {
		return
	}
	if len(req.Records) == 0 || len(req.Records) > MaxReplay {
		badField(w, "records", fmt.Sprintf("must name 1 to %d DLQ records ({\"partition\", \"offset\"}) to replay; %d named", MaxReplay, len(req.Records)))
		return
	}
	a.withKafka(w, r, func(ctx context.Context, cl *kgo.Client) error {
		s, err := operate.ReplayDLQ(ctx, cl, a.cfg.Logger, by(r), operate.Replay{Topic: a.cfg.Topic, Filter: req.DLQFilter, Only: req.Records})
		if errors.Is(err, operate.ErrNotFound) {
			msg := strings.TrimPrefix(err.Error(), operate.ErrNotFound.Error()+": ") + "; nothing was replayed"
			writeProblem(w, http.StatusNotFound, "records: "+msg, invalidParam{"records", msg})
			return nil
		}
		if err != nil {
			return err
		}
		writeJSON(w, map[string]any{"topic": a.cfg.Topic, "replayed": s.Replayed, "scanned": s.Scanned, "duplicates": s.Duplicates, "by_reason": s.ByReason})
		return nil
	})
}
