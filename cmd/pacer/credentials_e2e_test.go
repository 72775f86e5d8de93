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
