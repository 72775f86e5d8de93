package webhook

import (
	"context"
	"crypto/ecdsa"
	"crypto/subtle"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/twmb/franz-go/pkg/kgo"
)

// MaxBody is the largest webhook body accepted, in bytes (413 beyond).
const MaxBody = 4 << 20

// Config configures a [Server]. A provider whose secret is unset has no
// route: its requests get 404.
type Config struct {
	// WhatsAppAppSecret signs WhatsApp POSTs (X-Hub-Signature-256).
	WhatsAppAppSecret []byte
	// WhatsAppVerifyToken is what Meta's GET handshake must present as
	// hub.verify_token.
	WhatsAppVerifyToken string
	// SendGridKey verifies SendGrid's Event Webhook signatures.
	SendGridKey *ecdsa.PublicKey
	// Secrets, if set, gives senders secrets of their own, over the
	// single ones above; nil: none.
	Secrets Secrets
	// GenericSecrets are the HMAC keys of the generic route
	// ([ParseGenericSecrets]): a signature by any of them is accepted;
	// none: no generic route.
	GenericSecrets [][]byte
	// SendGridMaxAge is the oldest signed timestamp accepted; default 10 min.
	SendGridMaxAge time.Duration
	// ProduceTimeout is the longest wait for Kafka's acknowledgement
	// before answering 503; default 10 s.
	ProduceTimeout time.Duration
	Logger         *slog.Logger
	// Now is the clock; default time.Now.
	Now func() time.Time
}

// Secrets looks up the secrets of one sender (the credentials directory's
// files in cmd/pacer). A sender without its own uses the Config's.
type Secrets interface {
	// WhatsAppAppSecret returns the app secret that signs the webhooks of
	// phone-number ID id (digits only), or false.
	WhatsAppAppSecret(id string) ([]byte, bool)
	// SendGridKey returns the verification key of SendGrid pacing key key
	// (letters, digits, '-', '_', '.'; not starting with '.'), or false.
	SendGridKey(key string) (*ecdsa.PublicKey, bool)
}

// Producer is what the Server needs of a Kafka client (*kgo.Client).
type Producer interface {
	ProduceSync(ctx context.Context, rs ...*kgo.Record) kgo.ProduceResults
}

// Server answers the providers' webhooks:
//
//	GET  /webhook/whatsapp        Meta's verification handshake
//	POST /webhook/whatsapp        signed status webhooks
//	POST /webhook/sendgrid/{key}  signed Event Webhook batches for pacing key {key}
//	POST /webhook/generic         the platform's own outcomes, Standard Webhooks signed (generic.go)
//
// An accepted request's events are produced to their channel's events
// topic, and the answer is 200 only once Kafka acknowledged every one of
// them (503 otherwise: the provider retries). Refusals are RFC 9457
// problem+json: 401 unsigned or badly signed, 401 stale (SendGrid, generic), 400
// malformed (naming the field), 503 Kafka failed.
type Server struct {
	cfg Config
	kc  Producer
	m   *metrics
	mux *http.ServeMux
}

// New returns a Server producing with kc and registering its metrics
// with reg (nil: none).
func New(cfg Config, kc Producer, reg prometheus.Registerer) *Server {
	if cfg.SendGridMaxAge <= 0 {
		cfg.SendGridMaxAge = 10 * time.Minute
	}
	if cfg.ProduceTimeout <= 0 {
		cfg.ProduceTimeout = 10 * time.Second
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	s := &Server{cfg: cfg, kc: kc, m: newMetrics(reg), mux: http.NewServeMux()}
	if len(cfg.WhatsAppAppSecret) > 0 || cfg.Secrets != nil {
		s.mux.HandleFunc("GET /webhook/whatsapp", s.whatsappVerify)
		s.mux.HandleFunc("POST /webhook/whatsapp", s.whatsapp)
	}
	if cfg.SendGridKey != nil || cfg.Secrets != nil {
		s.mux.HandleFunc("POST /webhook/sendgrid/{key}", s.sendgrid)
	}
	if len(cfg.GenericSecrets) > 0 {
		s.mux.HandleFunc("POST /webhook/generic", s.generic)
	}
	return s
}

func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) { s.mux.ServeHTTP(w, r) }

// whatsappVerify answers Meta's handshake: hub.mode=subscribe and the
// verify token (constant-time compare) get hub.challenge back; anything
// else 403.
func (s *Server) whatsappVerify(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	tok := q.Get("hub.verify_token")
	if q.Get("hub.mode") != "subscribe" || s.cfg.WhatsAppVerifyToken == "" ||
		subtle.ConstantTimeCompare([]byte(tok), []byte(s.cfg.WhatsAppVerifyToken)) != 1 {
		s.m.requests.WithLabelValues("whatsapp", "bad-verify-token").Inc()
		writeProblem(w, http.StatusForbidden, "verification refused", "hub.mode must be subscribe and hub.verify_token the configured token")
		return
	}
	if q.Get("hub.challenge") == "" {
		s.m.requests.WithLabelValues("whatsapp", "malformed").Inc()
		writeProblem(w, http.StatusBadRequest, "malformed", "hub.challenge: missing (Meta sends one to echo)")
		return
	}
	s.m.requests.WithLabelValues("whatsapp", "verified").Inc()
	// The challenge is echoed as it came: plain text, never sniffed as HTML.
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	w.Header().Set("X-Content-Type-Options", "nosniff")
	io.WriteString(w, q.Get("hub.challenge"))
}

func (s *Server) whatsapp(w http.ResponseWriter, r *http.Request) {
	body, ok := s.read(w, r, "whatsapp")
	if !ok {
		return
	}
	secret := s.cfg.WhatsAppAppSecret
	if s.cfg.Secrets != nil {
		// The body is not verified yet: its phone-number ID only chooses
		// the secret it must be signed with.
		if id, ok := waSender(body); ok {
			if own, ok := s.cfg.Secrets.WhatsAppAppSecret(id); ok {
				secret = own
			}
		}
	}
	valid, present := whatsappSigned(secret, r.Header.Get("X-Hub-Signature-256"), body)
	switch {
	case present && len(secret) == 0:
		s.refuse(w, "whatsapp", "bad-signature", http.StatusUnauthorized, "no app secret is configured for this sender")
		return
	case !present:
		s.refuse(w, "whatsapp", "unsigned", http.StatusUnauthorized, "X-Hub-Signature-256 is missing")
		return
	case !valid:
		s.refuse(w, "whatsapp", "bad-signature", http.StatusUnauthorized, "X-Hub-Signature-256 does not match the body signed with the app secret")
		return
	}
	evs, err := parseWhatsApp(body)
	if err != nil {
		s.refuse(w, "whatsapp", "malformed", http.StatusBadRequest, err.Error())
		return
	}
	s.produce(w, r.Context(), "whatsapp", evs)
}

func (s *Server) sendgrid(w http.ResponseWriter, r *http.Request) {
	body, ok := s.read(w, r, "sendgrid")
	if !ok {
		return
	}
	sig, ts := r.Header.Get("X-Twilio-Email-Event-Webhook-Signature"), r.Header.Get("X-Twilio-Email-Event-Webhook-Timestamp")
	if sig == "" || ts == "" {
		s.refuse(w, "sendgrid", "unsigned", http.StatusUnauthorized,
			"X-Twilio-Email-Event-Webhook-Signature and X-Twilio-Email-Event-Webhook-Timestamp are both required")
		return
	}
	key := r.PathValue("key")
	if !validKey(key) {
		s.refuse(w, "sendgrid", "malformed", http.StatusBadRequest, "path: the pacing key may hold letters, digits, '-', '_' and '.' and not start with '.'")
		return
	}
	pub := s.cfg.SendGridKey
	if s.cfg.Secrets != nil {
		if own, ok := s.cfg.Secrets.SendGridKey(key); ok {
			pub = own
		}
	}
	if pub == nil {
		s.refuse(w, "sendgrid", "bad-signature", http.StatusUnauthorized, "no verification key is configured for this pacing key")
		return
	}
	if !sendgridSigned(pub, sig, ts, body) {
		s.refuse(w, "sendgrid", "bad-signature", http.StatusUnauthorized, "the signature does not verify the timestamp and body with the configured public key")
		return
	}
	sec, err := strconv.ParseInt(ts, 10, 64)
	age := s.cfg.Now().Sub(time.Unix(sec, 0))
	switch {
	case err != nil:
		s.refuse(w, "sendgrid", "stale", http.StatusUnauthorized, "X-Twilio-Email-Event-Webhook-Timestamp is not Unix seconds")
		return
	case age > s.cfg.SendGridMaxAge:
		s.refuse(w, "sendgrid", "stale", http.StatusUnauthorized,
			fmt.Sprintf("X-Twilio-Email-Event-Webhook-Timestamp is older than %s", s.cfg.SendGridMaxAge))
		return
	case age < -s.cfg.SendGridMaxAge:
		s.refuse(w, "sendgrid", "stale", http.StatusUnauthorized,
			fmt.Sprintf("X-Twilio-Email-Event-Webhook-Timestamp is further ahead than %s: check this host's clock", s.cfg.SendGridMaxAge))
		return
	}
	evs, err := parseSendGrid(body, key)
	if err != nil {
		s.refuse(w, "sendgrid", "malformed", http.StatusBadRequest, err.Error())
		return
	}
	s.produce(w, r.Context(), "sendgrid", evs)
}

// read returns r's body, or answers 413/400 and false.
func (s *Server) read(w http.ResponseWriter, r *http.Request, channel string) ([]byte, bool) {
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, MaxBody))
	if err != nil {
		var mb *http.MaxBytesError
		if errors.As(err, &mb) {
			s.refuse(w, channel, "malformed", http.StatusRequestEntityTooLarge, fmt.Sprintf("body: over %d bytes", MaxBody))
		} else {
			s.refuse(w, channel, "malformed", http.StatusBadRequest, "body: "+err.Error())
		}
		return nil, false
	}
	return body, true
}

// produce writes evs to their channel's events topic, keyed by pacing key
// (channel labels the metrics: a generic request's span channels), and
// answers 200 once Kafka acknowledged all of them, else 503. An event
// produced before a failure is produced again with the provider's retry:
// the outcome consumer applies it once either way.
func (s *Server) produce(w http.ResponseWriter, ctx context.Context, channel string, evs []Event) {
	recs := make([]*kgo.Record, len(evs))
	for i, ev := range evs {
		v, _ := json.Marshal(ev)
		recs[i] = &kgo.Record{Topic: Topic(ev.Channel), Key: []byte(ev.Key), Value: v}
	}
	if len(recs) > 0 {
		if err := s.produceWithin(ctx, recs); err != nil {
			s.cfg.Logger.Warn("webhook events not acknowledged by Kafka; answered 503 for the provider to retry",
				"channel", channel, "events", len(recs), "err", err)
			s.refuse(w, channel, "kafka-failed", http.StatusServiceUnavailable, "the events could not be stored; retry later")
			return
		}
	}
	s.m.requests.WithLabelValues(channel, "accepted").Inc()
	s.m.events.WithLabelValues(channel).Add(float64(len(recs)))
	w.Header().Set("Content-Type", "application/json")
	fmt.Fprintf(w, "{\"events\":%d}\n", len(recs))
}

// produceWithin produces recs and waits for Kafka's acknowledgement of all
// of them at most Config.ProduceTimeout: the first error, or
// context.DeadlineExceeded when the time passed first. The answer does not
// wait for the client to give up on its records: with the brokers down, an
// idempotent producer keeps records it has sequenced past any timeout, and
// the provider, not answered, would pile up requests. A record acknowledged
// after the 503 is produced again by the provider's retry, and applied once.
func (s *Server) produceWithin(ctx context.Context, recs []*kgo.Record) error {
	pctx, cancel := context.WithTimeout(ctx, s.cfg.ProduceTimeout)
	defer cancel()
	done := make(chan error, 1) // the producer's late answer never blocks
	go func() { done <- s.kc.ProduceSync(pctx, recs...).FirstErr() }()
	select {
	case err := <-done:
		return err
	case <-pctx.Done():
		return pctx.Err()
	}
}

func (s *Server) refuse(w http.ResponseWriter, channel, result string, status int, detail string) {
	s.m.requests.WithLabelValues(channel, result).Inc()
	writeProblem(w, status, strings.ReplaceAll(result, "-", " "), detail)
}

// writeProblem answers an RFC 9457 problem details object.
func writeProblem(w http.ResponseWriter, status int, title, detail string) {
	w.Header().Set("Content-Type", "application/problem+json")
	w.WriteHeader(status)
	json.NewEncoder(w).Encode(map[string]any{"type": "about:blank", "title": title, "status": status, "detail": detail})
}

// validKey reports whether key is a pacing key that can name a file:
// letters, digits, '-', '_', '.', not empty, not starting with '.'.
func validKey(key string) bool {
	if key == "" || key[0] == '.' || len(key) > 200 {
		return false
	}
	for _, c := range key {
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '-' || c == '_' || c == '.') {
			return false
		}
	}
	return true
}
