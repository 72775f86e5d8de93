package inflight

import (
	"math"
	"math/rand/v2"
	"sync"
	"testing"
	"testing/synctest"
	"time"
)

// send is one request of a key: it observes, in e, the time from leaving
// to its answer, which takes answer (virtual time in a synctest bubble).
func send(e *Estimator, answer time.Duration) {
	start := time.Now()
	time.Sleep(answer)
	e.Answered(time.Since(start))
}

func TestEstimatorFollowsAnswerTime(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	// log-normal of median 300 ms and p99 2 s: sigma = ln(2000/300) / 2.326
	sigma := math.Log(2000.0/300) / 2.326
	cases := []struct {
		name         string
		answer       func() time.Duration
		meanLo       time.Duration
		meanHi       time.Duration
		highLo, hiHi time.Duration
	}{
		{"fixed 300 ms", func() time.Duration { return 300 * time.Millisecond },
			299 * time.Millisecond, 301 * time.Millisecond, 299 * time.Millisecond, 302 * time.Millisecond},
		{"uniform 250-350 ms", func() time.Duration {
			return 250*time.Millisecond + time.Duration(r.Int64N(int64(100*time.Millisecond)))
		},
			260 * time.Millisecond, 340 * time.Millisecond, 330 * time.Millisecond, 500 * time.Millisecond},
		{"log-normal median 300 ms p99 2 s", func() time.Duration {
			return time.Duration(300 * math.Exp(sigma*r.NormFloat64()) * float64(time.Millisecond))
		}, 150 * time.Millisecond, 900 * time.Millisecond, 600 * time.Millisecond, 4 * time.Second},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				var e Estimator
				if _, ok := e.High(); ok {
					t.Fatal("High known before any answer")
				}
				// 2,000 sends, 20 at a time, as a key's senders make them.
				for range 100 {
					var wg sync.WaitGroup
					for range 20 {
						d := c.answer()
						wg.Go(func() { send(&e, d) })
					}
					wg.Wait()
				}
				mean, _ := e.Mean()
				high, ok := e.High()
				if !ok || mean < c.meanLo || mean > c.meanHi || high < c.highLo || high > c.hiHi {
					t.Errorf("mean %v (want %v..%v), high %v (want %v..%v)", mean, c.meanLo, c.meanHi, high, c.highLo, c.hiHi)
				}
			})
		})
	}
}

func TestEstimatorFirstAnswerAndSlowdown(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var e Estimator
		send(&e, 200*time.Millisecond)
		// RFC 6298: SRTT = R, RTTVAR = R/2.
		if m, _ := e.Mean(); m != 200*time.Millisecond {
			t.Errorf("mean after one answer = %v, want 200ms", m)
		}
		if h, _ := e.High(); h != 600*time.Millisecond {
			t.Errorf("high after one answer = %v, want 600ms", h)
		}
		for range 100 {
			send(&e, 200*time.Millisecond)
		}
		// The provider slows down to 1 s: within 20 answers the high
		// estimate is above the new answer time.
		for range 20 {
			send(&e, time.Second)
		}
		if h, _ := e.High(); h < time.Second {
			t.Errorf("high 20 answers after a slowdown to 1s = %v, want >= 1s", h)
		}
	})
}

func TestBound(t *testing.T) {
	fixed := func(d time.Duration) *Estimator {
		var e Estimator
		for range 200 {
			e.Answered(d)
		}
		return &e
	}
	cases := []struct {
		name  string
		e     *Estimator
		rate  float64
		burst int
		most  int
		want  int
	}{
		// ceil(1.2 x 1000 x 0.5) + 10 + 32
		{"1000/s at 500 ms", fixed(500 * time.Millisecond), 1000, 10, 1024, 642},
		{"1000/s at 300 ms", fixed(300 * time.Millisecond), 1000, 10, 1024, 402},
		{"80/s at 300 ms", fixed(300 * time.Millisecond), 80, 10, 1024, 71},
		{"instant provider", fixed(time.Millisecond), 1000, 10, 1024, 44},
		{"upper bound", fixed(2 * time.Second), 1000, 10, 1024, 1024},
		{"no answer yet: 1 s assumed", &Estimator{}, 80, 10, 1024, 138},
		{"rate unknown", fixed(time.Second), 0, 10, 512, 512},
		{"strict order", fixed(time.Second), 1000, 10, 1, 1},
		{"most 0 still 1", fixed(time.Second), 1000, 10, 0, 1},
		{"rate infinite", fixed(time.Second), math.Inf(1), 10, 300, 300},
	}
	for _, c := range cases {
		if got := c.e.Bound(c.rate, c.burst, c.most); got != c.want {
			t.Errorf("%s: Bound(%g, %d, %d) = %d, want %d", c.name, c.rate, c.burst, c.most, got, c.want)
		}
	}
}

// TestBoundReachesFullRate runs one key for 20 s of virtual time: a slot
// every 1 ms (1,000 msgs/s) taken only by a record that holds a place, at
// most Bound of them, each answered 500 ms after its slot, its answer time
// observed. It must send >= 99% of its slots once its first answers are
// in: a slow provider does not lower the key's rate.
func TestBoundReachesFullRate(t *testing.T) {
	for _, answer := range []time.Duration{time.Millisecond, 300 * time.Millisecond, 500 * time.Millisecond} {
		t.Run(answer.String(), func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				const rate, burst, most = 1000.0, 10, 1024
				var e Estimator
				var mu sync.Mutex
				held := 0
				sent, missed := 0, 0
				var wg sync.WaitGroup
				tick := time.NewTicker(time.Millisecond)
				defer tick.Stop()
				start := time.Now()
				for range 20_000 {
					<-tick.C
					warm := time.Since(start) > 2*time.Second
					mu.Lock()
					if held >= e.Bound(rate, burst, most) {
						mu.Unlock()
						if warm {
							missed++
						}
						continue
					}
					held++
					mu.Unlock()
					if warm {
						sent++
					}
					wg.Go(func() {
						send(&e, answer)
						mu.Lock()
						held--
						mu.Unlock()
					})
				}
				wg.Wait()
				if missed > (sent+missed)/100 {
					t.Errorf("%d of %d slots found no place (more than 1%%)", missed, sent+missed)
				}
			})
		})
	}
}

// TestBoundTooLowMissesSlots guards TestBoundReachesFullRate: with the
// fixed bound of 32 the pacer had, a 500 ms provider lets a 1,000/s key
// send about 64 msgs/s, and the simulation says so.
func TestBoundTooLowMissesSlots(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var e Estimator
		held, sent := 0, 0
		var mu sync.Mutex
		var wg sync.WaitGroup
		tick := time.NewTicker(time.Millisecond)
		defer tick.Stop()
		for range 5_000 {
			<-tick.C
			mu.Lock()
			if held >= e.Bound(1000, 10, 32) {
				mu.Unlock()
				continue
			}
			held++
			sent++
			mu.Unlock()
			wg.Go(func() {
				send(&e, 500*time.Millisecond)
				mu.Lock()
				held--
				mu.Unlock()
			})
		}
		wg.Wait()
		if sent > 5*64+32 {
			t.Errorf("sent %d of 5,000 slots with 32 places at 500 ms, want about 320", sent)
		}
	})
}

func TestEstimatorConcurrent(t *testing.T) {
	var e Estimator
	var wg sync.WaitGroup
	for range 8 {
		wg.Go(func() {
			for range 1000 {
				e.Answered(100 * time.Millisecond)
			}
		})
	}
	wg.Wait()
	if m, _ := e.Mean(); m != 100*time.Millisecond {
		t.Errorf("mean = %v, want 100ms", m)
	}
}
