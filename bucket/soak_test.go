//go:build soak

package bucket_test

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/pacerhq/pacer/bucket"
	"github.com/pacerhq/pacer/internal/testenv"
	"github.com/redis/go-redis/v9"
)

// The accuracy soak (`make bench`, or
// go test -tags soak -run '^TestAccuracySoak$' -v ./bucket/): 4 processes
// of 8 goroutines each share one pacing key for 30 s with demand far above
// its limit, first through Reserve, then through Lease. Every send is
// recorded twice: its slot on the Redis clock (as granted) and the local
// time it went (after the one sleep). The test then checks, over every
// window of every length T, that sends <= rate*T + burst (zero violations
// on the slots), and that at least 99% of rate*duration + burst was sent.
// For the local send times it reports the lateness after the slot and any
// windows that the lateness pushed over the bound.
//
// Environment: PACER_SOAK_SECONDS (default 30), PACER_SOAK_RATE (tokens/s,
// default 1000), PACER_SOAK_BURST (default 20).
const (
	soakProcs      = 4
	soakGoroutines = 8
)

func soakEnv(name string, def int) int {
	if v, err := strconv.Atoi(os.Getenv(name)); err == nil && v > 0 {
		return v
	}
	return def
}

func TestAccuracySoak(t *testing.T) {
	if os.Getenv("PACER_SOAK_CHILD") != "" {
		soakChild(t)
		return
	}
	seconds := soakEnv("PACER_SOAK_SECONDS", 30)
	rate := soakEnv("PACER_SOAK_RATE", 1000)
	burst := soakEnv("PACER_SOAK_BURST", 20)
	addr := testenv.RedisAddr(t)
	for _, mode := range []string{"reserve", "lease"} {
		t.Run(mode, func(t *testing.T) {
			dir := t.TempDir()
			key := "soak-" + mode + "-" + strconv.FormatInt(time.Now().UnixNano(), 36)
			start := time.Now().Add(3 * time.Second).Truncate(time.Millisecond)
			end := start.Add(time.Duration(seconds) * time.Second)
			var wg sync.WaitGroup
			outs := make([]string, soakProcs)
			for p := range soakProcs {
				outs[p] = filepath.Join(dir, "child"+strconv.Itoa(p))
				cmd := exec.Command(os.Args[0], "-test.run=^TestAccuracySoak$", "-test.count=1", "-test.timeout=10m")
				cmd.Env = append(os.Environ(),
					"PACER_SOAK_CHILD=1",
					"PACER_SOAK_MODE="+mode,
					"PACER_SOAK_KEY="+key,
					"PACER_SOAK_START="+strconv.FormatInt(start.UnixMicro(), 10),
					"PACER_SOAK_END="+strconv.FormatInt(end.UnixMicro(), 10),
					"PACER_SOAK_RATE="+strconv.Itoa(rate),
					"PACER_SOAK_BURST="+strconv.Itoa(burst),
					"PACER_SOAK_OUT="+outs[p],
					testenv.EnvRedisAddr+"="+addr,
				)
				wg.Go(func() {
					if out, err := cmd.CombinedOutput(); err != nil {
						t.Errorf("child %d: %v\n%s", p, err, out)
					}
				})
			}
			wg.Wait()
			if t.Failed() {
				return
			}
			var slots, sent []int64
			calls := 0
			for _, f := range outs {
				s, l, c := readSoak(t, f)
				slots, sent, calls = append(slots, s...), append(sent, l...), calls+c
			}
			lateness := make([]int64, len(slots))
			for i := range slots {
				lateness[i] = sent[i] - slots[i]
			}
			slices.Sort(slots)
			slices.Sort(sent)
			slices.Sort(lateness)
			want := float64(rate)*float64(seconds) + float64(burst)
			inWindow := 0
			for _, s := range slots {
				if s >= start.UnixMicro() && s <= end.UnixMicro() {
					inWindow++
				}
			}
			sv, sworst := violations(slots, int64(rate), int64(burst))
			lv, lworst := violations(sent, int64(rate), int64(burst))
			t.Logf("%s: %d processes x %d goroutines, one key, %d/s burst %d, %d s", mode, soakProcs, soakGoroutines, rate, burst, seconds)
			t.Logf("%s: sent %d of rate*duration+burst = %.0f (%.3f%%), %d Redis calls (%.4f per message)",
				mode, inWindow, want, 100*float64(inWindow)/want, calls, float64(calls)/float64(len(slots)))
			t.Logf("%s: slots on the Redis clock: %d windows over rate*T+burst (worst excess %.6f tokens)", mode, sv, sworst)
			t.Logf("%s: local send times: %d windows over rate*T+burst (worst excess %.3f tokens); lateness after the slot p50 %d µs, p99 %d µs, max %d µs",
				mode, lv, lworst, lateness[len(lateness)/2], lateness[len(lateness)*99/100], lateness[len(lateness)-1])
			if sv != 0 {
				t.Errorf("%s: %d windows of slots exceed rate*T + burst", mode, sv)
			}
			if float64(inWindow) < 0.99*want {
				t.Errorf("%s: sent %d, want >= 99%% of %.0f", mode, inWindow, want)
			}
			if float64(inWindow) > want {
				t.Errorf("%s: sent %d, more than rate*duration+burst = %.0f", mode, inWindow, want)
			}
		})
	}
}

// violations counts the sends j at which some window [s_i, s_j] holds more
// than rate*T + burst sends (times in µs), and returns the worst excess in
// tokens. It checks every window of every length in one pass: the excess of
// [s_i, s_j] is (j-i+1) - rate*(s_j-s_i), the max over i of which is
// (j+1 - rate*s_j) + max_i (rate*s_i - i).
func violations(ts []int64, rate, burst int64) (int, float64) {
	n := 0
	worst := int64(-1 << 62)
	best := int64(-1 << 62) // max over i <= j of rate*(s_i - s_0) - i*10^6, in millionths
	for j, s := range ts {
		best = max(best, rate*(s-ts[0])-int64(j)*1e6)
		excess := int64(j+1)*1e6 - rate*(s-ts[0]) + best // millionths of a token
		worst = max(worst, excess)
		if excess > burst*1e6 {
			n++
		}
	}
	return n, float64(worst-burst*1e6) / 1e6
}

func readSoak(t *testing.T, path string) (slots, sent []int64, calls int) {
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		if len(fields) == 2 && fields[0] == "calls" {
			calls, _ = strconv.Atoi(fields[1])
			continue
		}
		if len(fields) != 2 {
			t.Fatalf("%s: bad line %q", path, sc.Text())
		}
		a, _ := strconv.ParseInt(fields[0], 10, 64)
		b, _ := strconv.ParseInt(fields[1], 10, 64)
		slots, sent = append(slots, a), append(sent, b)
	}
	return slots, sent, calls
}

// soakChild is one process of the soak: soakGoroutines callers on one key
// from PACER_SOAK_START to PACER_SOAK_END (µs since the epoch), writing
// "slot_us sent_us" per send, and "calls N", to PACER_SOAK_OUT.
func soakChild(t *testing.T) {
	atoi := func(name string) int64 {
		v, err := strconv.ParseInt(os.Getenv(name), 10, 64)
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		return v
	}
	start, end := time.UnixMicro(atoi("PACER_SOAK_START")), time.UnixMicro(atoi("PACER_SOAK_END"))
	lim := bucket.Limit{PerSecond: float64(atoi("PACER_SOAK_RATE")), Burst: int(atoi("PACER_SOAK_BURST"))}
	mode, key := os.Getenv("PACER_SOAK_MODE"), os.Getenv("PACER_SOAK_KEY")
	rdb := redis.NewClient(&redis.Options{Addr: testenv.RedisAddr(t), DB: testenv.RedisDB, PoolSize: 2 * soakGoroutines})
	defer rdb.Close()
	l := bucket.New(rdb, bucket.Config{Prefix: "soak"})
	ctx := context.Background()
	if err := l.Load(ctx); err != nil {
		t.Fatal(err)
	}
	var leases atomic.Int64
	disp := bucket.NewDispenser(countLeases{l, &leases}, "soak", key, lim, 16, 50*time.Millisecond)
	time.Sleep(time.Until(start))

	var mu sync.Mutex
	var lines []string
	calls := 0
	record := func(slot int64) {
		sent := time.Now().UnixMicro()
		mu.Lock()
		lines = append(lines, strconv.FormatInt(slot, 10)+" "+strconv.FormatInt(sent, 10))
		mu.Unlock()
	}
	var wg sync.WaitGroup
	for range soakGoroutines {
		wg.Go(func() {
			for {
				left := time.Until(end)
				if left <= 0 {
					return
				}
				var r bucket.Reservation
				var err error
				switch mode {
				case "reserve":
					mu.Lock()
					calls++
					mu.Unlock()
					r, err = l.Reserve(ctx, "soak", key, lim, 1, min(200*time.Millisecond, left))
				case "lease":
					// One Dispenser per process, as the pacer uses it: one
					// lease of up to 16 slots serves the 8 goroutines.
					r, err = disp.Next(ctx)
				default:
					err = fmt.Errorf("mode %q", mode)
				}
				if err != nil {
					t.Error(err)
					return
				}
				if !r.OK {
					time.Sleep(min(r.Wait, time.Until(end)))
					continue
				}
				if mode == "lease" && r.At.After(end) {
					return // the last lease reached past the end: not counted
				}
				time.Sleep(time.Until(r.At))
				record(bucket.RedisSlot(r))
			}
		})
	}
	wg.Wait()
	if mode == "lease" {
		calls = int(leases.Load())
		if _, err := disp.Close(ctx); err != nil {
			t.Error(err)
		}
	}
	out := strings.Join(lines, "\n") + fmt.Sprintf("\ncalls %d\n", calls)
	if err := os.WriteFile(os.Getenv("PACER_SOAK_OUT"), []byte(out), 0o600); err != nil {
		t.Fatal(err)
	}
}

// countLeases counts the Lease calls of a Dispenser.
type countLeases struct {
	*bucket.Limiter
	n *atomic.Int64
}

func (c countLeases) Lease(ctx context.Context, channel, key string, lim bucket.Limit, n int, maxWait time.Duration) (bucket.Lease, error) {
	c.n.Add(1)
	return c.Limiter.Lease(ctx, channel, key, lim, n, maxWait)
}
