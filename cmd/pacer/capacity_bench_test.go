//go:build e2e

package main

import (
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/pacerhq/pacer/channels/whatsapp/whatsapptest"
	"github.com/pacerhq/pacer/internal/testenv"
)

// TestCapacityBench checks the capacity page (docs/capacity.md) by one
// run: numbers at 80/s burst 10 against the fake Cloud API answering in
// 250-350 ms (h2c), on the Redis Cluster the tests start, first through one
// `pacer run` (PACER_BENCH_CAPACITY_KEYS numbers, default 25), then through
// three replicas of one consumer group with three times the numbers. It
// logs msgs/s per process (the fake's deliveries from first to last
// arrival, over the processes), each number's share of its rate, CPU
// seconds per 1,000 messages of the processes, and Redis commands per
// message over the cluster's masters (INFO commandstats; other tests
// using the cluster meanwhile would add theirs: run it alone).
//
//	PACER_BENCH_CAPACITY=1 go test -tags e2e -count=1 -timeout 30m -v -run '^TestCapacityBench$' ./cmd/pacer/
func TestCapacityBench(t *testing.T) {
	if os.Getenv("PACER_BENCH_CAPACITY") == "" {
		t.Skip("measurement: run with PACER_BENCH_CAPACITY=1 (make bench-capacity)")
	}
	keys := 25
	if v, err := strconv.Atoi(os.Getenv("PACER_BENCH_CAPACITY_KEYS")); err == nil && v > 0 {
		keys = v
	}
	const per, rate = 1600, 80.0
	one := capacityRun(t, 1, keys, per, rate)
	three := capacityRun(t, 3, 3*keys, per, rate)
	t.Logf("capacity: | replicas | numbers | msgs/s | per process | per number (min / median) | Pacer CPU s per 1,000 | Redis commands per msg | Redis CPU s per 1,000 | Kafka CPU s per 1,000 | load |")
	for _, r := range []capacityResult{one, three} {
		t.Logf("capacity: | %d | %d | %.0f | %.0f | %s | %.3f | %.2f | %.4f | %.4f | %s |", r.replicas, r.keys, r.msgsPerSec,
			r.msgsPerSec/float64(r.replicas), sharesOf(r.shares), r.cpuPer1000, r.commandsPerMsg, r.redisPer1000, r.kafkaPer1000, r.load)
	}
	perOne, perThree := one.msgsPerSec, three.msgsPerSec/3
	t.Logf("capacity: per process %.0f (3 replicas) against %.0f (one): %.1f%%; Redis commands per message %.2f against %.2f (%+.1f%%)",
		perThree, perOne, perThree/perOne*100, three.commandsPerMsg, one.commandsPerMsg, (three.commandsPerMsg/one.commandsPerMsg-1)*100)
}

type capacityResult struct {
	replicas, keys int
	msgsPerSec     float64
	shares         []float64
	cpuPer1000     float64
	commandsPerMsg float64
	redisPer1000   float64 // CPU seconds of the cluster's masters per 1,000 messages
	kafkaPer1000   float64 // CPU seconds of the Kafka brokers per 1,000 messages
	load           string
}

// redisCPU is the CPU seconds (user + system) the redis-server at addr
// used since it started (INFO cpu).
func redisCPU(t *testing.T, addr string) float64 {
	host, port, _ := strings.Cut(addr, ":")
	out, err := exec.Command("redis-cli", "-h", host, "-p", port, "INFO", "cpu").Output()
	if err != nil {
		t.Fatalf("INFO cpu: %v", err)
	}
	var sum float64
	for _, line := range strings.Split(string(out), "\n") {
		k, v, ok := strings.Cut(strings.TrimSpace(line), ":")
		if ok && (k == "used_cpu_sys" || k == "used_cpu_user") {
			f, _ := strconv.ParseFloat(v, 64)
			sum += f
		}
	}
	return sum
}

// kafkaCPU is the CPU seconds every Kafka broker on the machine (a JVM
// running kafka.Kafka) used since it started.
func kafkaCPU(t *testing.T) float64 {
	out, _ := exec.Command("pgrep", "-f", "kafka.Kafka").Output()
	var sum float64
	for _, f := range strings.Fields(string(out)) {
		if pid, err := strconv.Atoi(f); err == nil {
			if _, err := os.Stat(fmt.Sprintf("/proc/%d", pid)); err == nil {
				sum += procCPU(t, pid)
			}
		}
	}
	return sum
}

// capacityRun delivers keys x per messages at rate per number through
// replicas `pacer run` processes on the Redis Cluster.
func capacityRun(t *testing.T, replicas, keys, per int, rate float64) capacityResult {
	e := newE2E(t, whatsapptest.Config{})
	addrs := testenv.ClusterAddrs(t)
	lines, _ := campaign(keys, per, fmt.Sprintf("c%d", replicas))
	if code, out, errs := e.publish(lines, "--partitions", "12"); code != 0 {
		t.Fatalf("publish: %d %s %s", code, out, errs)
	}
	n := keys * per
	fake := newSlowFake(t, e, slowUniform)
	before := map[string]int64{}
	for _, a := range addrs {
		for c, v := range commandStats(t, a) {
			before[a+" "+c] = v
		}
	}
	redisCPU0 := map[string]float64{}
	for _, a := range addrs {
		redisCPU0[a] = redisCPU(t, a)
	}
	kafkaCPU0 := kafkaCPU(t)
	load0 := loadAvg()
	env := []string{"PACER_WHATSAPP_H2C=true", "PACER_REDIS_CLUSTER_ADDRS=" + strings.Join(addrs, ","),
		fmt.Sprintf("PACER_WHATSAPP_RATE=%g", rate), "PACER_WHATSAPP_BURST=10", fmt.Sprintf("PACER_EXPECTED_REPLICAS=%d", replicas)}
	var ps []*proc
	for range replicas {
		ps = append(ps, e.run(env...))
	}
	cpu0 := make([]float64, len(ps))
	for i, p := range ps {
		cpu0[i] = procCPU(t, p.cmd.Process.Pid)
	}
	res := fake.measure(t, ps[0].cmd.Process.Pid, n, time.Duration(float64(per)/rate*3+180)*time.Second, ps[0].logs)
	var cpu float64
	for i, p := range ps {
		cpu += procCPU(t, p.cmd.Process.Pid) - cpu0[i]
	}
	var late float64
	for _, p := range ps {
		v, _ := p.metric(t, `pacer_late_slots_total{channel="whatsapp"}`)
		late += v
	}
	for _, p := range ps {
		p.stop(t)
	}
	var rcpu []string
	var redisTotal float64
	for _, a := range addrs {
		d := redisCPU(t, a) - redisCPU0[a]
		redisTotal += d
		rcpu = append(rcpu, fmt.Sprintf("%.2f", d))
	}
	kcpu := kafkaCPU(t) - kafkaCPU0
	var commands int64
	for _, a := range addrs {
		for c, v := range commandStats(t, a) {
			if c == "cluster" || c == "info" || c == "ping" || c == "command" || c == "hello" || c == "client" {
				continue // the clients' own housekeeping, not per message
			}
			commands += v - before[a+" "+c]
		}
	}
	r := capacityResult{replicas: replicas, keys: keys, msgsPerSec: float64(res.delivered) / res.seconds,
		shares: fake.keyShares(rate), cpuPer1000: cpu / float64(res.delivered) * 1000,
		commandsPerMsg: float64(commands) / float64(res.delivered), load: load0 + " → " + loadAvg(),
		redisPer1000: redisTotal / float64(res.delivered) * 1000, kafkaPer1000: kcpu / float64(res.delivered) * 1000}
	t.Logf("%d replica(s): Redis CPU s per master %v (%.4f s per 1,000 msgs in all); Kafka brokers' CPU %.2fs (%.4f s per 1,000 msgs, every broker the servers run)",
		replicas, rcpu, r.redisPer1000, kcpu, r.kafkaPer1000)
	t.Logf("%d replica(s), %d numbers: delivered %d (duplicates %d) in %.2fs; %.0f slots lapsed; most in 1 s %d; CPU %.2fs; %d Redis commands",
		replicas, keys, res.delivered, res.duplicates, res.seconds, late, res.max1s, cpu, commands)
	if res.duplicates != 0 {
		t.Errorf("%d duplicates", res.duplicates)
	}
	return r
}
