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

func (s *downStore) Add(context.Context, string, map[string]*control.Counts) error { return nil }

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
