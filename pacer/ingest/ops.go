package ingest

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"time"
)

// The process's own paths, served next to the API on the same address and
// described by openapi.yaml too: /healthz (the process is alive), /readyz
// ([Server.Readiness]) and /metrics (Deps.Metrics, when set). GET and HEAD
// only; any other method is 405 problem+json with Allow, as on the API's
// paths. They are not answers of the API: pacer_ingest_requests_total does
// not count them, and only a 405 costs the client IP a request.

// opsAllow is the Allow field of a 405 on an ops path and on /openapi.yaml.
const opsAllow = "GET, HEAD"

// registerOps adds the ops paths to mux.
func (s *Server) registerOps(mux *http.ServeMux) {
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		io.WriteString(w, "ok\n")
	})
	mux.HandleFunc("GET /readyz", func(w http.ResponseWriter, r *http.Request) {
		ctx, cancel := context.WithTimeout(r.Context(), time.Second)
		defer cancel()
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		if err := s.Readiness(ctx); err != nil {
			w.WriteHeader(http.StatusServiceUnavailable)
			fmt.Fprintf(w, "not ready: %v\n", err)
			return
		}
		io.WriteString(w, "ready\n")
	})
	paths := []string{"/healthz", "/readyz"}
	if s.deps.Metrics != nil {
		mux.Handle("GET /metrics", s.deps.Metrics)
		paths = append(paths, "/metrics")
	}
	for _, p := range paths {
		mux.HandleFunc(p, s.notAllowed(opsAllow))
	}
}

// Readiness returns nil when the gateway can take requests, else an error
// naming the first check that failed, in this order: the tenants file
// loaded, Kafka answering (Deps.KafkaPing: without Kafka every request
// waits out the produce timeout for a 503), and Redis answering
// (Deps.RedisPing; not checked with RedisFailure "local", which answers
// without it).
func (s *Server) Readiness(ctx context.Context) error {
	if s.deps.Tenants() == nil {
		return errors.New("tenants: no tenants file loaded yet")
	}
	if s.deps.KafkaPing != nil {
		if err := s.deps.KafkaPing(ctx); err != nil {
			return fmt.Errorf("kafka: %w", err)
		}
	}
	if s.deps.RedisPing != nil && s.cfg.RedisFailure != "local" {
		if err := s.deps.RedisPing(ctx); err != nil {
			return fmt.Errorf("redis: %w", err)
		}
	}
	return nil
}

// Ready reports whether [Server.Readiness] finds nothing wrong.
func (s *Server) Ready(ctx context.Context) bool { return s.Readiness(ctx) == nil }
