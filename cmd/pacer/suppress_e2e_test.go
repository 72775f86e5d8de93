//go:build e2e

package main

import (
	"bytes"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/pacerhq/pacer/channels/fcm/fcmtest"
	"github.com/pacerhq/pacer/internal/testenv"
)

// TestSuppressionEndToEnd: the FCM fake answers UNREGISTERED for 40 of 200
// registration tokens. A first campaign dead-letters those 40 as
// permanent:UNREGISTERED and suppresses them; a second campaign to the same
// tokens makes no request to them and dead-letters them
// suppressed:unregistered, the 160 others delivered again. The Redis round
// trips per delivered message of that second campaign are no more than
// those of the same campaign sent by a pacer with PACER_SUPPRESS=false.
func TestSuppressionEndToEnd(t *testing.T) {
	measured(t)
	var b [4]byte
	rand.Read(b[:])
	id := hex.EncodeToString(b[:])
	const n, dead = 200, 40
	tokens := make([]string, n)
	for i := range tokens {
		tokens[i] = fmt.Sprintf("tok-%s-%03d", id, i)
	}
	fake := fcmtest.NewServer(fcmtest.Config{Unregistered: tokens[:dead]})
	t.Cleanup(fake.Close)
	creds := filepath.Join(t.TempDir(), "sa.json")
	if err := os.WriteFile(creds, fake.ServiceAccountJSON(), 0o600); err != nil {
		t.Fatal(err)
	}
	prefix := "pacer-sup-" + id
	env := func(topic string, extra ...string) []string {
		return append(append(os.Environ(),
			"PACER_KAFKA_BROKERS="+testenv.KafkaBrokers(t), "PACER_REDIS_URL="+testenv.RedisURL(t),
			"PACER_REDIS_PREFIX="+prefix, "PACER_FCM_BASE_URL="+fake.URL(), "PACER_FCM_CREDENTIALS_FILE="+creds,
			"PACER_METRICS_ADDR=127.0.0.1:0", "PACER_LOG_FORMAT=text", "PACER_DRAIN=10s",
			// No slow start: the first pacer would ramp the project (cold
			// here) through its campaigns and the second not, and the
			// longer run takes more of the periodic round trips per
			// message, whatever suppression costs.
			"PACER_FCM_SLOW_START=0s"), extra...)
	}
	publish := func(topic, tag string) {
		t.Helper()
		var lines strings.Builder
		for i, tok := range tokens {
			fmt.Fprintf(&lines, `{"id":"%s-%03d","key":%q,"to":%q,"payload":{"data":{"n":"%d"}}}`+"\n", tag, i, fcmtest.ProjectID, tok, i)
		}
		cmd := exec.Command(pacerBin, "publish", "--channel", "fcm", "--topic", topic, "-")
		cmd.Env, cmd.Stdin = env(topic), strings.NewReader(lines.String())
		var out bytes.Buffer
		cmd.Stdout, cmd.Stderr = &out, &out
		if err := cmd.Run(); err != nil {
			t.Fatalf("pacer publish: %v\n%s", err, out.String())
		}
	}
	run := func(topic string, extra ...string) *proc {
		p := startPacer(t, env(topic, extra...), "run", "--channel", "fcm", "--topic", topic, "--group", "g-"+topic)
		if !waitFor(60*time.Second, func() bool { v, _ := p.metric(t, `pacer_ready{channel="fcm"}`); return v == 1 }) {
			t.Fatalf("pacer run not ready within 60 s\n%s", p.logs())
		}
		return p
	}
	series := func(name, labels string) string {
		if labels == "" {
			return name + `{channel="fcm"}`
		}
		return name + `{channel="fcm",` + labels + `}`
	}
	// wait waits until p delivered delivered and dead-lettered dlq
	// records with reason, and returns its round trips and deliveries.
	wait := func(p *proc, delivered, dlq float64, reason string) (trips, got float64) {
		t.Helper()
		ok := waitFor(90*time.Second, func() bool {
			d, _ := p.metric(t, series("pacer_delivered_total", ""))
			x, _ := p.metric(t, series("pacer_dlq_total", `reason="`+reason+`"`))
			return d >= delivered && x >= dlq
		})
		if !ok {
			t.Fatalf("not %v delivered and %v dead-lettered %s within 90 s\n%s", delivered, dlq, reason, p.logs())
		}
		return p.mustMetric(t, series("pacer_redis_round_trips_total", "")), p.mustMetric(t, series("pacer_delivered_total", ""))
	}
	requestsTo := func(toks []string) int {
		set := map[string]bool{}
		for _, tk := range toks {
			set[tk] = true
		}
		c := 0
		for _, a := range fake.Arrivals() {
			if set[a.To] {
				c++
			}
		}
		return c
	}

	topic := "pacer.fcm.sup-" + id
	p := run(topic)
	publish(topic, "c1")
	wait(p, n-dead, dead, "permanent")
	if v := p.mustMetric(t, series("pacer_suppressions_added_total", `reason="unregistered"`)); v != dead {
		t.Fatalf("pacer_suppressions_added_total = %v; want %d", v, dead)
	}
	if got := requestsTo(tokens[:dead]); got != dead {
		t.Fatalf("first campaign: %d requests to the dead tokens; want %d", got, dead)
	}
	trips0, del0 := p.mustMetric(t, series("pacer_redis_round_trips_total", "")), p.mustMetric(t, series("pacer_delivered_total", ""))
	publish(topic, "c2")
	tripsOn, delOn := wait(p, 2*(n-dead), dead, "suppressed")
	if v := p.mustMetric(t, series("pacer_suppressed_total", `reason="unregistered"`)); v != dead {
		t.Errorf("pacer_suppressed_total{unregistered} = %v; want %d", v, dead)
	}
	p.stop(t)
	if got := requestsTo(tokens[:dead]); got != dead {
		t.Errorf("second campaign: %d requests to the dead tokens in all; want %d (none in the second)", got, dead)
	}
	if got := requestsTo(tokens[dead:]); got != 2*(n-dead) {
		t.Errorf("%d requests to the live tokens; want %d", got, 2*(n-dead))
	}
	reasons := map[string]int{}
	for _, r := range consumeAll(t, testenv.KafkaBrokers(t), topic+".dlq", 2*dead) {
		for _, h := range r.Headers {
			if h.Key == "pacer-reason" {
				reasons[string(h.Value)]++
			}
		}
	}
	if reasons["permanent:UNREGISTERED"] != dead || reasons["suppressed:unregistered"] != dead {
		t.Errorf("DLQ reasons %v; want %d permanent:UNREGISTERED and %d suppressed:unregistered", reasons, dead, dead)
	}

	// The same second campaign through a pacer that does not suppress (its
	// own topic and group; the dead tokens are asked again).
	off := "pacer.fcm.nosup-" + id
	q := run(off, "PACER_SUPPRESS=false")
	trips1, del1 := q.mustMetric(t, series("pacer_redis_round_trips_total", "")), q.mustMetric(t, series("pacer_delivered_total", ""))
	publish(off, "c3")
	tripsOff, delOff := wait(q, n-dead, dead, "permanent")
	q.stop(t)
	on := (tripsOn - trips0) / (delOn - del0)
	offPer := (tripsOff - trips1) / (delOff - del1)
	t.Logf("Redis round trips per delivered message: %.3f with suppression (%v over %v), %.3f without (%v over %v)",
		on, tripsOn-trips0, delOn-del0, offPer, tripsOff-trips1, delOff-del1)
	if on > offPer {
		t.Errorf("%.3f Redis round trips per delivered message with suppression; more than the %.3f without", on, offPer)
	}
}
