//go:build e2e

package main

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"os/exec"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/pacerhq/pacer/channels/whatsapp/whatsapptest"
)

// tokenGate plays the Cloud API's authentication in front of the fake: each
// phone-number ID has its own system-user access token, and a request with
// another answers HTTP 401 with Graph error 190, as Meta does
// (https://developers.facebook.com/documentation/business-messaging/whatsapp/support/error-codes).
// A request that passes goes on to the fake with the fake's own token.
type tokenGate struct {
	tokens    map[string]string // phone-number ID -> access token
	fakeToken string
	next      http.Handler

	mu      sync.Mutex
	refused map[string]int // phone-number ID -> 401s
}

func (g *tokenGate) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	parts := strings.Split(strings.Trim(r.URL.Path, "/"), "/") // {version}/{phone-number ID}/messages
	key := ""
	if len(parts) == 3 {
		key = parts[1]
	}
	if want, ok := g.tokens[key]; !ok || r.Header.Get("Authorization") != "Bearer "+want {
		g.mu.Lock()
		g.refused[key]++
		g.mu.Unlock()
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusUnauthorized)
		fmt.Fprint(w, `{"error":{"message":"Invalid OAuth access token - Cannot parse access token","type":"OAuthException","code":190,"fbtrace_id":"AgateTrace190"}}`)
		return
	}
	r.Header.Set("Authorization", "Bearer "+g.fakeToken)
	g.next.ServeHTTP(w, r)
}

// TestEndToEndCredentialsPerSender: `pacer run` on the real Kafka and Redis
// with three WhatsApp numbers: two with their own access token in
// PACER_CREDENTIALS_DIR (mounted the way Kubernetes mounts a Secret), one
// without, and no default token. The first two are delivered, each with its
// own token; the third is dead-lettered as no-credentials. Once its file
// appears (an atomic ..data swap), `pacer dlq replay --reason
// no-credentials` delivers it, without a restart. No token appears in the
// log, the DLQ, /metrics, the replay's output or `pacer status`.
func TestEndToEndCredentialsPerSender(t *testing.T) {
	parallel(t)
	const per = 5
	e := newE2E(t, whatsapptest.Config{})
	numA, numB, numC := "106540352201", "106540352202", "106540352203"
	tokens := map[string]string{numA: "EAAG-tenant-A-secret-0a1b2c", numB: "EAAG-tenant-B-secret-3d4e5f", numC: "EAAG-tenant-C-secret-6a7b8c"}
	gate := &tokenGate{tokens: tokens, fakeToken: "e2e-secret-token", next: e.fake.Handler(), refused: map[string]int{}}
	gs := httptest.NewServer(gate)
	t.Cleanup(gs.Close)

	mount := &secretMount{t: t, dir: t.TempDir()}
	mount.update(map[string]string{"whatsapp." + numA: tokens[numA] + "\n", "whatsapp." + numB: tokens[numB]})

	var lines strings.Builder
	for i := range per {
		for _, k := range []string{numA, numB, numC} {
			fmt.Fprintf(&lines, `{"id":"cred-%s-%d","key":%q,"to":"1555%07d","payload":{"type":"text","text":{"body":"m%d"}}}`+"\n", k, i, k, i, i)
		}
	}
	if code, out, errs := e.publish(lines.String()); code != 0 {
		t.Fatalf("publish: %d %s %s", code, out, errs)
	}
	start := time.Now()
	p := e.run("PACER_WHATSAPP_BASE_URL="+gs.URL, "PACER_WHATSAPP_TOKEN=", "PACER_CREDENTIALS_DIR="+mount.dir)
	e.waitDelivered(2*per, 60*time.Second, p)
	firstTwo := time.Since(start)
	dlq := consumeAll(t, e.brokers, e.topic+".dlq", per)
	if len(dlq) != per {
		t.Fatalf("DLQ holds %d records, want %d\n%s", len(dlq), per, p.logs())
	}
	for _, r := range dlq {
		reason := ""
		for _, h := range r.Headers {
			if h.Key == "pacer-reason" {
				reason = string(h.Value)
			}
		}
		if string(r.Key) != numC || reason != "no-credentials" {
			t.Errorf("DLQ record of key %s has reason %q; want %s no-credentials", r.Key, reason, numC)
		}
	}
	st := e.fake.Stats()
	if st[numA].Delivered != per || st[numB].Delivered != per || st[numC].Delivered != 0 {
		t.Errorf("delivered A=%d B=%d C=%d; want %d, %d, 0", st[numA].Delivered, st[numB].Delivered, st[numC].Delivered, per, per)
	}
	t.Logf("two numbers on two tokens: %d delivered in %v; third number: %d dead-lettered as no-credentials",
		st[numA].Delivered+st[numB].Delivered, firstTwo.Round(time.Millisecond), len(dlq))

	// The third number's token arrives, as Kubernetes updates a Secret.
	added := time.Now()
	mount.update(map[string]string{"whatsapp." + numA: tokens[numA], "whatsapp." + numB: tokens[numB], "whatsapp." + numC: tokens[numC]})
	if !waitFor(30*time.Second, func() bool { return strings.Contains(p.logs(), `credential added" channel=whatsapp key=`+numC) }) {
		t.Fatalf("the new credential file was not picked up within 30 s\n%s", p.logs())
	}
	pickedUp := time.Since(added)
	replay := exec.Command(pacerBin, "dlq", "replay", "--channel", "whatsapp", "--topic", e.topic, "--reason", "no-credentials")
	replay.Env = e.env()
	replayOut, err := replay.CombinedOutput()
	if err != nil {
		t.Fatalf("dlq replay: %v\n%s", err, replayOut)
	}
	e.waitDelivered(3*per, 60*time.Second, p)
	st = e.fake.Stats()
	for _, k := range []string{numA, numB, numC} {
		if st[k].Delivered != per || st[k].Duplicates != 0 {
			t.Errorf("number %s: delivered %d (duplicates %d), want %d exactly once", k, st[k].Delivered, st[k].Duplicates, per)
		}
	}
	gate.mu.Lock()
	refused := fmt.Sprint(gate.refused)
	gate.mu.Unlock()
	if refused != "map[]" {
		t.Errorf("the gate refused tokens: %s; each number must send with its own", refused)
	}
	t.Logf("third number's file picked up %v after the swap; replay: %s; delivered A=%d B=%d C=%d, 401s %s",
		pickedUp.Round(time.Millisecond), strings.TrimSpace(string(replayOut)), st[numA].Delivered, st[numB].Delivered, st[numC].Delivered, refused)

	// No credential anywhere: log, DLQ, /metrics, replay output, status.
	_, metrics := httpGet(t, "http://"+p.metricsAddr(t)+"/metrics")
	status := exec.Command(pacerBin, "status", "--channel", "whatsapp")
	status.Env = e.env()
	statusOut, _ := status.CombinedOutput()
	p.stop(t)
	var dlqText strings.Builder
	for _, r := range dlq {
		dlqText.Write(r.Value)
		for _, h := range r.Headers {
			dlqText.WriteString(h.Key + "=" + string(h.Value) + "\n")
		}
	}
	for what, text := range map[string]string{"log": p.logs(), "DLQ": dlqText.String(), "/metrics": metrics,
		"dlq replay": string(replayOut), "status": string(statusOut)} {
		for _, tok := range tokens {
			if strings.Contains(text, tok) {
				t.Errorf("%s holds an access token", what)
			}
		}
	}
	if !strings.Contains(dlqText.String(), "no-credentials") {
		t.Errorf("DLQ detail does not name the reason:\n%s", dlqText.String())
	}
}

// TestEndToEndRefusedCredential: `pacer run` on the real Kafka and Redis
// with one WhatsApp number whose credential file holds a wrong token. Meta
// answers 401 (Graph error 190): a halt, so the number's breaker opens and
// its records are requeued (reason breaker), none dead-lettered; only the
// requests in flight when the first 401 came back carry the wrong token
// (the first burst at most, not a second of slots). Once the file holds
// the right token, the number's next records are sent with it at once,
// well before the breaker's open period (1 min here) would end.
func TestEndToEndRefusedCredential(t *testing.T) {
	measured(t)
	const burst, before, after = 3, 100, 10
	e := newE2E(t, whatsapptest.Config{})
	num := "106540352209"
	good := "EAAG-tenant-D-secret-9f8e7d"
	gate := &tokenGate{tokens: map[string]string{num: good}, fakeToken: "e2e-secret-token", next: e.fake.Handler(), refused: map[string]int{}}
	gs := httptest.NewServer(gate)
	t.Cleanup(gs.Close)
	mount := &secretMount{t: t, dir: t.TempDir()}
	mount.update(map[string]string{"whatsapp." + num: "EAAG-tenant-D-wrong-000000"})
	batch := func(prefix string, n int) {
		var lines strings.Builder
		for i := range n {
			fmt.Fprintf(&lines, `{"id":"%s-%d","key":%q,"to":"1555%07d","payload":{"type":"text","text":{"body":"m%d"}}}`+"\n", prefix, i, num, i, i)
		}
		if code, out, errs := e.publish(lines.String()); code != 0 {
			t.Fatalf("publish: %d %s %s", code, out, errs)
		}
	}
	batch("refused", before)
	p := e.run("PACER_WHATSAPP_BASE_URL="+gs.URL, "PACER_WHATSAPP_TOKEN=", "PACER_CREDENTIALS_DIR="+mount.dir,
		"PACER_WHATSAPP_RATE=50", fmt.Sprintf("PACER_WHATSAPP_BURST=%d", burst), "PACER_HALT_COOLDOWN=1m")
	refused := func() int {
		gate.mu.Lock()
		defer gate.mu.Unlock()
		return gate.refused[num]
	}
	if !waitFor(60*time.Second, func() bool {
		v, _ := p.metric(t, `pacer_requeued_total{channel="whatsapp",reason="breaker"}`)
		return v >= before-burst-2
	}) {
		t.Fatalf("the number's records were not requeued by its breaker; 401s %d\n%s", refused(), p.logs())
	}
	time.Sleep(time.Second) // a second of slots: what was sent before this fix
	n401 := refused()
	if n401 < 1 || n401 > burst+2 {
		t.Errorf("%d requests with the wrong token, want 1 to %d (the first burst and the requests in flight)", n401, burst+2)
	}
	if dlq, _ := p.metric(t, `pacer_dlq_total{channel="whatsapp",reason="permanent"}`); dlq != 0 {
		t.Errorf("%v records dead-lettered, want none", dlq)
	}

	fixed := time.Now()
	mount.update(map[string]string{"whatsapp." + num: good})
	if !waitFor(30*time.Second, func() bool { return strings.Contains(p.logs(), `credential updated" channel=whatsapp key=`+num) }) {
		t.Fatalf("the fixed credential file was not picked up within 30 s\n%s", p.logs())
	}
	batch("fixed", after)
	if !waitFor(20*time.Second, func() bool { return e.fake.Stats()[num].Delivered >= after }) {
		t.Fatalf("%d delivered within 20 s of the fixed file, want the %d records published after it (the breaker stays open 1 min otherwise)\n%s",
			e.fake.Stats()[num].Delivered, after, p.logs())
	}
	took := time.Since(fixed)
	if !strings.Contains(p.logs(), "breaker closed: the key's credential was replaced") {
		t.Errorf("log lacks the breaker's closing for the replaced credential")
	}
	if got := refused(); got != n401 {
		t.Errorf("%d more requests with the wrong token after the file was fixed, want none", got-n401)
	}
	t.Logf("wrong token: %d requests refused (burst %d), %d records requeued; fixed file: %d delivered %v after the swap",
		n401, burst, before, e.fake.Stats()[num].Delivered, took.Round(time.Millisecond))
	p.stop(t)
}
