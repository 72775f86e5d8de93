package consumer

import (
	"context"
	"strconv"
	"sync"
	"time"

	"github.com/pacerhq/pacer/internal/tick"
	"github.com/pacerhq/pacer/pacer/envelope"
	"github.com/twmb/franz-go/pkg/kgo"
)

// parkedRecheck is how often a parked record waiting for its due time
// looks whether its key's rate rose.
const parkedRecheck = 250 * time.Millisecond

// parkRateHeader returns the envelope.HeaderParkRate header for rate msgs/s.
func parkRateHeader(rate float64) kgo.RecordHeader {
	return kgo.RecordHeader{Key: envelope.HeaderParkRate, Value: []byte(strconv.FormatFloat(rate, 'g', 6, 64))}
}

// parkRateOf returns r's envelope.HeaderParkRate in msgs/s, 0 when it has none (or a
// value that is not a rate > 0).
func parkRateOf(r *kgo.Record) float64 {
	for _, h := range r.Headers {
		if h.Key == envelope.HeaderParkRate {
			if v, err := strconv.ParseFloat(string(h.Value), 64); err == nil && v > 0 {
				return v
			}
		}
	}
	return 0
}

// rescaleDue moves due, estimated at was msgs/s, to where it falls when
// the key's rate became rate msgs/s at since: the records ahead of it
// drain at rate from since on. A due at or before since, or a rate not
// above was, is kept.
func rescaleDue(due, since time.Time, was, rate float64) time.Time {
	left := due.Sub(since)
	if left <= 0 || !(rate > was) || !(was > 0) {
		return due
	}
	return since.Add(time.Duration(float64(left) * was / rate))
}

// waitRescaled waits until due, estimated at was msgs/s, and reports
// false if ctx ended first. At once and then every parkedRecheck it asks
// rate(was) for the lowest rate the key has had since it rose above was,
// and since when; when there is one, due is moved earlier as if the
// records ahead had drained at it since then (rescaleDue). A lowered rate
// keeps due: the copy comes back early and waits for its slot in the
// bucket, as every parked copy may.
func waitRescaled(ctx context.Context, due time.Time, was float64, rate func(was float64) (float64, time.Time)) bool {
	for {
		if r, since := rate(was); r > was {
			due = rescaleDue(due, since, was, r)
			was = r
		}
		left := time.Until(due)
		if left <= 0 {
			return ctx.Err() == nil
		}
		if !tick.Sleep(ctx, min(left, parkedRecheck)) {
			return false
		}
	}
}

// rateMarks remembers, per pacing key, the rates this process's parked
// records saw and since when (the last marksKept changes), so a record
// that starts its wait after a raise is moved as from the raise (the
// records ahead of it have drained at the new rate since), not from its
// own start, even when the AIMD moved the rate a little since. Keys not
// seen for marksForget are dropped once more than marksMax are kept.
type rateMarks struct {
	mu sync.Mutex
	m  map[string][]rateMark // oldest first
}

type rateMark struct {
	rate  float64
	since time.Time
}

const (
	marksKept   = 32
	marksMax    = 1000
	marksForget = 10 * time.Minute
)

// seen records rate (msgs/s) as key's at now and returns the lowest rate
// key has had since its rate last rose above was, and since when; rate
// itself and now when it is not above was.
func (rm *rateMarks) seen(key string, rate, was float64, now time.Time) (float64, time.Time) {
	rm.mu.Lock()
	defer rm.mu.Unlock()
	if rm.m == nil {
		rm.m = map[string][]rateMark{}
	}
	h := rm.m[key]
	if len(h) == 0 || h[len(h)-1].rate != rate {
		if len(rm.m) >= marksMax {
			for k, kh := range rm.m {
				if now.Sub(kh[len(kh)-1].since) > marksForget {
					delete(rm.m, k)
				}
			}
		}
		h = append(h, rateMark{rate: rate, since: now})
		if len(h) > marksKept {
			h = h[len(h)-marksKept:]
		}
		rm.m[key] = h
	}
	lowest, since := rate, now
	for i := len(h) - 1; i >= 0 && h[i].rate > was; i-- {
		lowest, since = min(lowest, h[i].rate), h[i].since
	}
	return lowest, since
}

// waitParked holds f's record until its due time, like waitDue; a copy
// parked beyond its key's lookahead (envelope.HeaderParkRate) is taken early when its
// key's rate rose meanwhile (`pacer limit set`, a clean AIMD window): its
// due time was an estimate of its slot at the old rate. The key's rate is
// read as the key's senders read it (its policy and adapted rate, from
// Redis at most once per second per key and process), so a replica that
// does not send for the key sees the raise too.
func (p *Pacer) waitParked(f *flight) bool {
	was := parkRateOf(f.r)
	key := string(f.r.Key)
	if was == 0 || key == "" || !time.Now().Before(f.m.due) {
		return f.w.waitDue(f.m.due)
	}
	ctx := f.w.ctx
	return waitRescaled(ctx, f.m.due, was, func(was float64) (float64, time.Time) {
		k := p.keys.Get(key, "")
		defer k.Done()
		lim := k.Limit(ctx, time.Now(), f.log)
		return p.parkMarks.seen(key, lim.PerSecond, was, time.Now())
	})
}
