package ingest_test

import (
	"log/slog"
	"testing"
)

type tlog struct{ t *testing.T }

func (w tlog) Write(p []byte) (int, error) { w.t.Log(string(p)); return len(p), nil }

func testLogger(t *testing.T) *slog.Logger { return slog.New(slog.NewTextHandler(tlog{t}, nil)) }
