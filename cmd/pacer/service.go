package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"time"
)

// What the HTTP services (`pacer ingest`, `pacer webhook`) share: how they
// start and how they drain.

// startService begins `pacer <command>`, a service configured by
// environment variables only: it parses args as parseNoFlags does, then
// loads the shared settings (every channel's, none singled out) and, by
// load, the command's own, and reports every problem of both at once, as
// errConfig's. It returns the shared settings and a logger whose lines
// carry component=<command>.
func startService(command string, settingsHelp func() string, args []string, stderr io.Writer, lookup func(string) (string, bool), load func() error) (config, *slog.Logger, error) {
	if err := parseNoFlags(command, settingsHelp, args, stderr); err != nil {
		return config{}, nil, err
	}
	cfg, err := loadConfig(lookup, nil)
	if err := errors.Join(err, load()); err != nil {
		return cfg, nil, fmt.Errorf("%w: %w", errConfig, err)
	}
	return cfg, newLogger(cfg, stderr).With("component", command), nil
}

// serveUntilDone serves hs on ln until ctx ends, then shuts hs down,
// waiting at most drain for the requests in flight. hs.Serve's error, or
// any other errc receives first (the service's other parts send theirs
// there), ends it at once and is returned. errc must have room for
// hs.Serve's error.
func serveUntilDone(ctx context.Context, hs *http.Server, ln net.Listener, errc chan error, drain time.Duration) error {
	go func() { errc <- hs.Serve(ln) }()
	select {
	case err := <-errc:
		return err
	case <-ctx.Done():
	}
	sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), drain)
	defer cancel()
	return hs.Shutdown(sctx)
}
