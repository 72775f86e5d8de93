//go:build benchingest

package ingest_test

import (
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/pacerhq/pacer/internal/testenv"
	"github.com/pacerhq/pacer/pacer/ingest"
)

// outcome is what the load generator saw of one request.
type outcome struct {
	sent     time.Duration // since the load started, when the request was sent
	at       time.Duration // since the load started, when the answer came
	status   int
	ids      []string // the ids sent
	accepted []string // ids the answer lists as accepted (202, or kept by a 503)
	problem  bool     // Content-Type application/problem+json
	retry    string   // Retry-After
}

// post sends one NDJSON batch of ids and reads the answer.
func post(c *http.Client, url string, ids []string) (outcome, error) {
	var b strings.Builder
	for i, id := range ids {
		fmt.Fprintf(&b, `{"id":%q,"key":"%d","to":"15551234567","payload":{"type":"text"}}`+"\n", id, i)
	}
	req, _ := http.NewRequest("POST", url, strings.NewReader(b.String()))
	req.Header.Set("Authorization", "Bearer "+acmeKey)
	req.Header.Set("Content-Type", "application/x-ndjson")
	resp, err := c.Do(req)
	if err != nil {
		return outcome{}, err
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	o := outcome{status: resp.StatusCode, ids: ids, problem: resp.Header.Get("Content-Type") == "application/problem+json",
		retry: resp.Header.Get("Retry-After")}
	var a struct {
		ingest.Answer
		Nested *ingest.Answer `json:"answer"`
	}
	json.Unmarshal(body, &a)
	if a.Nested != nil {
		a.Answer = *a.Nested
	}
	for _, x := range a.Accepted {
		if !x.Duplicate {
			o.accepted = append(o.accepted, x.ID)
		}
	}
	return o, nil
}

// TestLoadKafkaRestart: 16 connections post batches of 10 envelopes while
// the broker (a private one) is restarted. Every id answered 202 (or listed
// as kept by a 503) is on the topic exactly once; requests the broker
// could not acknowledge get 503 with Retry-After and problem+json, never
// 202. Then the client retries every id refused with 503 once the broker is
// back, as a client would, and the topic is counted again: an id the
// broker wrote but whose acknowledgement was lost in the restart is on the
// topic twice after the retry, and the figure says how often that happens.
func TestLoadKafkaRestart(t *testing.T) {
	brokers, restart := testenv.PrivateKafka(t)
	r := newRigOn(t, brokers, 1e6, 1e6, 3*time.Second)
	hs := httptest.NewServer(r.srv)
	defer hs.Close()
	url := hs.URL + "/v1/channels/whatsapp/messages"
	const workers, batch = 16, 10
	before, after := 10*time.Second, 10*time.Second

	var (
		mu       sync.Mutex
		outs     []outcome
		stop     atomic.Bool
		next     atomic.Int64
		netErrs  atomic.Int64
		wg       sync.WaitGroup
		start    = time.Now()
		transErr error
	)
	c := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: workers}, Timeout: 30 * time.Second}
	for range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for !stop.Load() {
				ids := make([]string, batch)
				for i := range ids {
					ids[i] = fmt.Sprintf("r%d", next.Add(1))
				}
				sent := time.Since(start)
				o, err := post(c, url, ids)
				o.sent = sent
				if err != nil {
					netErrs.Add(1)
					mu.Lock()
					transErr = err
					mu.Unlock()
					time.Sleep(10 * time.Millisecond)
					continue
				}
				o.at = time.Since(start)
				mu.Lock()
				outs = append(outs, o)
				mu.Unlock()
			}
		}()
	}
	time.Sleep(before)
	// The broker's port is probed every 20 ms through the restart: the
	// spans in which it refused connections are the outage.
	var (
		outages  [][2]time.Duration
		probing  atomic.Bool
		probed   = make(chan struct{})
		downFrom = time.Duration(-1)
	)
	probing.Store(true)
	go func() {
		defer close(probed)
		for probing.Load() {
			conn, err := net.DialTimeout("tcp", brokers, 100*time.Millisecond)
			now := time.Since(start)
			if err != nil && downFrom < 0 {
				downFrom = now
			} else if err == nil {
				conn.Close()
				if downFrom >= 0 {
					outages = append(outages, [2]time.Duration{downFrom, now})
					downFrom = -1
				}
			}
			time.Sleep(20 * time.Millisecond)
		}
	}()
	down := time.Since(start)
	restart()
	up := time.Since(start)
	time.Sleep(after)
	probing.Store(false)
	<-probed
	stop.Store(true)
	wg.Wait()
	t.Logf("broker port closed: %v", outages)
	if len(outages) == 0 {
		t.Errorf("the probe never saw the broker's port closed")
	}
	t.Logf("load %.1fs; broker restart from %.1fs to %.1fs (kafka.sh restart: SIGTERM, start on the same ports and data, ready)",
		time.Since(start).Seconds(), down.Seconds(), up.Seconds())
	if n := netErrs.Load(); n > 0 {
		t.Errorf("%d requests failed without an HTTP answer (last: %v)", n, transErr)
	}

	codes := map[int]int{}
	acked := map[string]bool{}   // 202, or kept by a 503
	refused := map[string]bool{} // in a 503, not kept
	var during [2]int            // answers between down and up + 5 s: 202, 503
	var bad503 int
	first503, last503 := time.Duration(-1), time.Duration(0) // earliest sent, latest answered
	for _, o := range outs {
		codes[o.status]++
		for _, id := range o.accepted {
			acked[id] = true
		}
		switch o.status {
		case 202:
			if len(o.accepted) != len(o.ids) {
				t.Errorf("202 listing %d of %d ids as accepted", len(o.accepted), len(o.ids))
			}
		case 503:
			if !o.problem || o.retry == "" {
				bad503++
			}
			if first503 < 0 {
				first503 = o.sent
			}
			first503, last503 = min(first503, o.sent), max(last503, o.at)
			kept := map[string]bool{}
			for _, id := range o.accepted {
				kept[id] = true
			}
			for _, id := range o.ids {
				if !kept[id] {
					refused[id] = true
				}
			}
		}
		for _, span := range outages {
			if o.status == 202 && o.sent >= span[0] && o.at <= span[1] {
				t.Errorf("202 for a request sent at %v and answered at %v, while the broker's port was closed (%v to %v)", o.sent, o.at, span[0], span[1])
			}
		}
		if o.at >= down && o.at < up+5*time.Second {
			switch o.status {
			case 202:
				during[0]++
			case 503:
				during[1]++
			}
		}
	}
	t.Logf("answers: %v; around the restart (from SIGTERM to 5 s after ready): %d × 202, %d × 503; 503s sent from %v, answered until %v",
		codes, during[0], during[1], first503, last503)
	for code := range codes {
		if code != 202 && code != 503 {
			t.Errorf("%d answers %d: want only 202 and 503", codes[code], code)
		}
	}
	if codes[503] == 0 {
		t.Errorf("no 503: the restart hit no request")
	}
	if bad503 > 0 {
		t.Errorf("%d × 503 without Retry-After or problem+json", bad503)
	}

	counts := r.countIDs(t)
	lost, twice, ghosts := 0, 0, 0
	for id := range acked {
		switch n := counts[id]; {
		case n == 0:
			lost++
		case n > 1:
			twice++
		}
	}
	for id := range refused {
		if counts[id] > 0 {
			ghosts++
		}
	}
	t.Logf("acknowledged (202 or kept by a 503): %d ids; on the topic: %d missing, %d more than once; refused by a 503: %d ids, %d of them on the topic anyway",
		len(acked), lost, twice, len(refused), ghosts)
	if lost > 0 || twice > 0 {
		t.Errorf("of %d acknowledged ids, %d are missing from the topic and %d are on it more than once", len(acked), lost, twice)
	}

	// The client retries what was refused, once the broker is back.
	ids := make([]string, 0, len(refused))
	for id := range refused {
		ids = append(ids, id)
	}
	sort.Strings(ids)
	retried := map[int]int{}
	for i := 0; i < len(ids); i += batch {
		o, err := post(c, url, ids[i:min(i+batch, len(ids))])
		if err != nil {
			t.Fatal(err)
		}
		retried[o.status]++
	}
	counts = r.countIDs(t)
	twiceAfter := 0
	for id := range refused {
		if counts[id] > 1 {
			twiceAfter++
		}
	}
	t.Logf("retry of the %d refused ids: answers %v; %d of them on the topic more than once afterwards; %d distinct ids on the topic",
		len(refused), retried, twiceAfter, len(counts))
	for id := range refused {
		if counts[id] == 0 {
			t.Errorf("id %s: refused, retried, and not on the topic", id)
			break
		}
	}
}
