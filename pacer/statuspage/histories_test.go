package statuspage

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/pacerhq/pacer/pacer/statuspage/history"
)

// dipScenario publishes one key from two replicas, every 5 s from
// base-10 min (base: a step's end, at most 10 s ago) to base+2 min, so
// the page, however late it reads, finds readings up to its newest step:
// r1 at 30 msgs/s, r2 at 20, both at 1 msg/s over the minute that began at
// base-6 min, when r1 also counted 2 throttles a reading and held 200
// records (10 otherwise). r2 stopped (its Run ended) after that: only its
// history remains.
func dipScenario(t *testing.T) (srv *httptest.Server, key string, base time.Time) {
	t.Helper()
	rdb, cfg := setup(t)
	ctx := context.Background()
	key = "15550000042"
	base = time.Now().Truncate(history.Step)
	dip := func(at time.Time) bool {
		return at.After(base.Add(-6*time.Minute)) && !at.After(base.Add(-5*time.Minute))
	}
	for _, r := range []struct {
		name string
		rate float64
	}{{"r1", 30}, {"r2", 20}} {
		src := &source{}
		c := cfg
		c.Replica = r.name
		pub := NewPublisher(rdb, c, src.get)
		var delivered, throttled uint64
		for at := base.Add(-10 * time.Minute); !at.After(base.Add(2 * time.Minute)); at = at.Add(5 * time.Second) {
			rate, backlog := r.rate, 0
			if r.name == "r1" {
				backlog = 10
			}
			if dip(at) {
				rate = 1
				if r.name == "r1" {
					throttled += 2
					backlog = 200
				}
			}
			delivered += uint64(5 * rate)
			src.set(KeyActivity{Key: key, Delivered: delivered, Throttled: throttled, Backlog: backlog})
			if err := pub.Publish(ctx, at); err != nil {
				t.Fatal(err)
			}
		}
		if r.name == "r2" { // stopped: its entries go, its history stays
			rdb.ZRem(ctx, replicasKey(cfg.Prefix, channel), r.name)
			rdb.Del(ctx, replicaKey(cfg.Prefix, channel, r.name))
		}
	}
	mux := http.NewServeMux()
	New(rdb, cfg).Register(mux)
	srv = httptest.NewServer(mux)
	t.Cleanup(srv.Close)
	return srv, key, base
}

// /status.json carries each row's last hour, summed over the replicas
// (one of them stopped), with the minute of the dip in it: 2 msgs/s, 4
// throttles and a backlog of 200 a step, against 50 msgs/s, none and 10
// around it.
func TestHistoryShowsADip(t *testing.T) {
	srv, key, base := dipScenario(t)
	res, err := http.Get(srv.URL + "/status.json?q=" + key)
	if err != nil {
		t.Fatal(err)
	}
	var st Status
	err = json.NewDecoder(res.Body).Decode(&st)
	res.Body.Close()
	if err != nil || len(st.Keys) != 1 {
		t.Fatalf("status.json: %d keys, %v", len(st.Keys), err)
	}
	h := st.Keys[0].History
	if h == nil {
		t.Fatalf("no history for %s: %+v", key, st.Keys[0])
	}
	if h.StepSeconds != 10 || len(h.Achieved) != 360 || len(h.Throttles) != 360 || len(h.Backlog) != 360 || h.Replicas != 2 {
		t.Fatalf("history: step %v s, %d/%d/%d points, %d replicas; want 10 s, 360 each, 2 replicas", h.StepSeconds, len(h.Achieved), len(h.Throttles), len(h.Backlog), h.Replicas)
	}
	dips, sum := 0, int64(0)
	for i := range h.Achieved {
		start := h.Start.Add(time.Duration(i) * history.Step)
		var ach float64
		var th, bl int64
		switch {
		case start.Equal(base.Add(-10*time.Minute - history.Step)):
			// The first reading, at base-10 min, covers the 5 s before it:
			// 250 messages in the step.
			ach, th, bl = 25, 0, 10
		case start.Before(base.Add(-10 * time.Minute)):
			ach, th, bl = 0, 0, 0 // no reading yet
		case !start.Before(base.Add(-6*time.Minute)) && start.Before(base.Add(-5*time.Minute)):
			ach, th, bl = 2, 4, 200
			dips++
		default:
			ach, th, bl = 50, 0, 10
		}
		sum += h.Throttles[i]
		if h.Achieved[i] != ach || h.Throttles[i] != th || h.Backlog[i] != bl {
			t.Errorf("step at %s: achieved %v, %d throttles, backlog %d; want %v, %d, %d",
				start.Format("15:04:05"), h.Achieved[i], h.Throttles[i], h.Backlog[i], ach, th, bl)
		}
	}
	if dips != 6 || sum != 24 {
		t.Errorf("%d steps of the dip, %d throttles; want 6, 24", dips, sum)
	}
}

// The page draws the history: the key's achieved line falls at the dip,
// whose step carries a red dot and is named ("dip to 2/s at ...").
func TestHistoryDipInChromium(t *testing.T) {
	srv, key, base := dipScenario(t)
	dom := string(chromium(t, "--virtual-time-budget=10000", "--dump-dom", srv.URL+"/status?q="+key))
	m := regexp.MustCompile(`<div class="h" data-history-key="` + key + `" data-dip="(\d+)" data-dip-achieved="([0-9.]+)">(.*?)</svg>`).FindStringSubmatch(dom)
	if m == nil {
		t.Fatalf("no history with a dip for %s on the page:\n%s", key, tail(dom, 4000))
	}
	dip, _ := strconv.Atoi(m[1])
	if m[2] != "2" || !strings.Contains(m[3], "dip to 2/s at ") || !strings.Contains(m[3], "(median 50/s)") {
		t.Errorf("the dip: %s msgs/s, %q; want 2, named against a median of 50", m[2], m[3])
	}
	pts := regexp.MustCompile(`<svg class="achieved"[^>]*><polyline points="([^"]+)"`).FindStringSubmatch(m[3])
	if pts == nil {
		t.Fatalf("no achieved sparkline: %q", m[3])
	}
	var ys []float64
	for _, p := range strings.Fields(pts[1]) {
		_, y, _ := strings.Cut(p, ",")
		v, _ := strconv.ParseFloat(y, 64)
		ys = append(ys, v)
	}
	if len(ys) != 360 {
		t.Fatalf("%d points in the line, want 360", len(ys))
	}
	// The dot is on the dip's first step, 6 minutes before the newest
	// (which is 10 to 20 s old when read) and as many steps more as the
	// page was read after base (up to a minute and a half on a loaded
	// machine).
	if n := len(ys) - 1 - dip; n < 34 || n > 48 {
		t.Errorf("dot %d steps before the newest; want about 36 (6 minutes)", n)
	}
	// SVG's y grows downward: the minute's 6 steps are near the bottom (y
	// 33.6 of 35 at 2 of 50 msgs/s), the steps around them at the top (y 1).
	line := fmt.Sprint(ys[dip-1 : dip+7])
	if want := "[1 33.6 33.6 33.6 33.6 33.6 33.6 1]"; line != want {
		t.Errorf("line around the dip: y %s; want %s", line, want)
	}
	_ = base
}

// A replica writes only the keys whose points changed; when its history
// hash was gone (expired, or lost by Redis), the next publish finds out
// and the one after writes every kept key again.
func TestHistoryWrittenAgainWhenGone(t *testing.T) {
	rdb, cfg, src, pub := setupPublisher(t)
	ctx := context.Background()
	hk := cfg.Prefix + ":status:{" + channel + "}:history:" + pub.replica
	at := time.Now()
	src.set(KeyActivity{Key: "a", Delivered: 50}, KeyActivity{Key: "b", Delivered: 10})
	if err := pub.Publish(ctx, at); err != nil {
		t.Fatal(err)
	}
	if n, err := rdb.HLen(ctx, hk).Result(); err != nil || n != 2 {
		t.Fatalf("after the first publish: %d keys in %s, %v; want 2", n, hk, err)
	}
	rdb.Del(ctx, hk)
	src.set(KeyActivity{Key: "a", Delivered: 60}, KeyActivity{Key: "b", Delivered: 10}) // b unchanged
	for i := 1; i <= 2; i++ {
		if err := pub.Publish(ctx, at.Add(time.Duration(i)*5*time.Second)); err != nil {
			t.Fatal(err)
		}
	}
	if ks, err := rdb.HKeys(ctx, hk).Result(); err != nil || fmt.Sprint(ks) != "[a b]" && fmt.Sprint(ks) != "[b a]" {
		t.Fatalf("after the hash was gone: %v in %s, %v; want a and b written again", ks, hk, err)
	}
	if ttl := rdb.PTTL(ctx, hk).Val(); ttl < 59*time.Minute || ttl > time.Hour {
		t.Errorf("history hash expires in %v, want an hour", ttl)
	}
}
