package campaign

import (
	"context"
	"errors"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/pacerhq/pacer/internal/testenv"
	"github.com/pacerhq/pacer/pacer/control"
)

// downStore is a Store whose States fails until up is set.
type downStore struct {
	mu sync.Mutex
	up bool
}

func (s *downStore) States(_ context.Context, _ string, names []string) ([]control.State, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if !s.up {
		return nil, errors.New("dial tcp 127.0.0.1:6379: connect: connection refused")
	}
	return make([]control.State, len(names)), nil
}

func (s *downStore) AddBatch(context.Context, string, string, map[string]*control.Counts) ([]string, error) {
	return nil, nil
}

// lossyStore adds batches once per token, as control.Store does, and
// loses the answer of the first loseAnswers calls after adding their
// batch (Redis applied it; the reply did not come back).
type lossyStore struct {
	downStore
	loseAnswers int
	seen        map[string]bool
	delivered   map[string]int64
	calls       int
}

func (s *lossyStore) AddBatch(_ context.Context, _ string, token string, counts map[string]*control.Counts) ([]string, error) {
	s.calls++
	if !s.seen[token] {
		s.seen[token] = true
		for k, n := range counts {
			s.delivered[k] += n.Delivered
		}
	}
	if s.loseAnswers > 0 {
		s.loseAnswers--
		return nil, errors.New("i/o timeout")
	}
	return nil, nil
}

// TestFlushAddsALostBatchOnce: counts whose add was applied but answered
// by an error are sent again under their token, so they are added once;
// the counts gathered meanwhile are added after it, under their own.
func TestFlushAddsALostBatchOnce(t *testing.T) {
	st := &lossyStore{loseAnswers: 2, seen: map[string]bool{}, delivered: map[string]int64{}}
	c := &Live{store: st, channel: "whatsapp", log: slog.New(slog.DiscardHandler),
		base: t.Context(), states: map[string]*state{}, counts: map[string]*control.Counts{}}
	for range 5 {
		c.Count("spring", true, "")
	}
	c.Flush(t.Context()) // added, answer lost
	for range 3 {
		c.Count("spring", true, "")
	}
	c.Flush(t.Context()) // the first batch again, answer lost again
	c.Flush(t.Context()) // the first batch again, answered
	c.Flush(t.Context()) // the 3 gathered meanwhile
	c.Flush(t.Context()) // nothing left
	if got := st.delivered["spring"]; got != 8 || st.calls != 4 {
		t.Errorf("spring delivered %d in %d calls, want 8 in 4 (each batch added once)", got, st.calls)
	}
}

// TestCampaignStatesOutageLogsOnceAMinute: a Redis outage of 150 s,
// retried every Refresh, logs "campaign states unavailable" three
// times (at once, a minute on, two minutes on), not at every retry, and
// one "campaign states recovered" line when Redis answers again.
func TestCampaignStatesOutageLogsOnceAMinute(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var buf testenv.SyncBuffer
		st := &downStore{}
		c := &Live{store: st, channel: "whatsapp", log: slog.New(slog.NewTextHandler(&buf, nil)),
			base: t.Context(), states: map[string]*state{}, counts: map[string]*control.Counts{}}
		done := make(chan struct{})
		go func() {
			defer close(done)
			c.refresh(t.Context(), []string{"spring"})
		}()
		time.Sleep(150 * time.Second)
		st.mu.Lock()
		st.up = true
		st.mu.Unlock()
		<-done
		out := buf.String()
		if n := strings.Count(out, "campaign states unavailable"); n != 3 {
			t.Errorf("%d unavailable lines in a 150 s outage retried every %v, want 3:\n%s", n, Refresh, out)
		}
		if n := strings.Count(out, "campaign states recovered"); n != 1 {
			t.Errorf("%d recovered lines, want 1:\n%s", n, out)
		}
	})
}
