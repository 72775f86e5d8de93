package history

import (
	"errors"
	"fmt"
	"math"
	"runtime"
	"strings"
	"testing"
	"time"
)

// t0 starts a slot: 2026-01-05 00:00:00 UTC.
var t0 = time.Date(2026, 1, 5, 0, 0, 0, 0, time.UTC)

// feed records key's readings every 5 s from start for d: rate(t) msgs/s
// delivered over each reading's 5 s, th(t) throttles, backlog(t).
func feed(r *Recorder, key string, start time.Time, d time.Duration, rate func(time.Duration) float64, th func(time.Duration) uint64, backlog func(time.Duration) int) {
	for at := 5 * time.Second; at <= d; at += 5 * time.Second {
		r.Add(key, start.Add(at-5*time.Second), start.Add(at), uint64(math.Round(5*rate(at))), th(at), backlog(at))
	}
}

func none(time.Duration) uint64 { return 0 }

// series flushes r at now and merges key's entry as the page does, up to
// the slot before now's.
func series(t *testing.T, r *Recorder, key string, now time.Time) *Series {
	s, _ := seriesEntry(t, r, key, now)
	return s
}

func seriesEntry(t *testing.T, r *Recorder, key string, now time.Time) (*Series, string) {
	t.Helper()
	fields, _ := r.Flush(now, nil)
	for i := 0; i < len(fields); i += 2 {
		if fields[i] == key {
			s, err := Merge(Slot(now)-1, []string{fields[i+1].(string)})
			if err != nil {
				t.Fatal(err)
			}
			return s, fields[i+1].(string)
		}
	}
	t.Fatalf("Flush at %v wrote no entry of %s", now, key)
	return nil, ""
}

// After 70 minutes of readings the ring holds the last 60: a rate of
// 10/s for the first 30 minutes, then 40/s, one minute of 2/s at minute 50
// (with 3 throttles a reading), a backlog that grows by one a minute.
// Minutes 0-10 left the ring; each step reads what it was fed.
func TestRingWrapsAfterAnHour(t *testing.T) {
	r := NewRecorder(10)
	rate := func(at time.Duration) float64 {
		switch {
		case at > 50*time.Minute && at <= 51*time.Minute:
			return 2
		case at > 30*time.Minute:
			return 40
		}
		return 10
	}
	th := func(at time.Duration) uint64 {
		if at > 50*time.Minute && at <= 51*time.Minute {
			return 3
		}
		return 0
	}
	feed(r, "15550000001", t0, 70*time.Minute, rate, th, func(at time.Duration) int { return int(at / time.Minute) })
	now := t0.Add(70 * time.Minute)
	s, entry := seriesEntry(t, r, "15550000001", now)
	if len(s.Achieved) != Points || len(s.Throttles) != Points || len(s.Backlog) != Points {
		t.Fatalf("%d, %d, %d points; want %d", len(s.Achieved), len(s.Throttles), len(s.Backlog), Points)
	}
	if want := t0.Add(10 * time.Minute); !s.Start.Equal(want) || s.StepSeconds != 10 {
		t.Fatalf("starts %v, step %v s; want %v, 10 s", s.Start, s.StepSeconds, want)
	}
	for i := range Points {
		end := 10*time.Minute + time.Duration(i+1)*Step // the step's end since t0
		want, wantTh := rate(end), 2*th(end)
		if got := s.Achieved[i]; got != want {
			t.Fatalf("step %d (ending at minute %v): achieved %v msgs/s, want %v", i, end.Minutes(), got, want)
		}
		if got := s.Throttles[i]; got != int64(wantTh) {
			t.Fatalf("step %d: %d throttles, want %d", i, got, wantTh)
		}
		if got, want := s.Backlog[i], int64(end/time.Minute); got != want {
			t.Fatalf("step %d: backlog %d, want %d", i, got, want)
		}
	}
	// 2 minutes more with nothing to read: the entry needs no write, and
	// read 2 minutes on its last steps are 0.
	later := now.Add(2 * time.Minute)
	r.Add("15550000001", later.Add(-5*time.Second), later, 0, 0, 0)
	if f, _ := r.Flush(later, nil); len(f) != 0 {
		t.Fatalf("an idle reading wrote %v", keysOf(f))
	}
	s, err := Merge(Slot(later)-1, []string{entry})
	if err != nil {
		t.Fatal(err)
	}
	if s.Achieved[Points-13] != 40 || s.Achieved[Points-12] != 0 || s.Achieved[Points-1] != 0 {
		t.Fatalf("2 minutes idle: achieved %v at the last step read, then %v, %v; want 40, 0, 0", s.Achieved[Points-13], s.Achieved[Points-12], s.Achieved[Points-1])
	}
}

// A reading that spans a step's end shares its deliveries by time: 30
// messages over 12:00:05-12:00:15 are 15 in each step (1.5/s); its
// throttles and backlog go to the step it ended in.
func TestReadingSharedAmongSteps(t *testing.T) {
	r := NewRecorder(10)
	r.Add("k", t0.Add(5*time.Second), t0.Add(15*time.Second), 30, 2, 7)
	s := series(t, r, "k", t0.Add(20*time.Second))
	got := fmt.Sprint(s.Achieved[Points-2:], s.Throttles[Points-2:], s.Backlog[Points-2:])
	if want := "[1.5 1.5] [0 2] [0 7]"; got != want {
		t.Fatalf("got %s, want %s", got, want)
	}
}

// Two replicas' entries add up step by step: r1 sent 20/s the whole
// 10 minutes; r2 10/s for the first 5, then stopped (its entry stays,
// no newer point: 0 after); r2 had a backlog of 4 while it ran.
func TestMergeAddsReplicas(t *testing.T) {
	r1, r2 := NewRecorder(10), NewRecorder(10)
	now := t0.Add(10 * time.Minute)
	feed(r1, "k", t0, 10*time.Minute, func(time.Duration) float64 { return 20 }, none, func(time.Duration) int { return 0 })
	feed(r2, "k", t0, 5*time.Minute, func(time.Duration) float64 { return 10 }, none, func(time.Duration) int { return 4 })
	f1, _ := r1.Flush(now, nil)
	f2, _ := r2.Flush(t0.Add(5*time.Minute), nil)
	s, err := Merge(Slot(now)-1, []string{f1[1].(string), f2[1].(string)})
	if err != nil {
		t.Fatal(err)
	}
	if s.Replicas != 2 {
		t.Errorf("%d replicas, want 2", s.Replicas)
	}
	first := Points - 60 // the step starting at t0
	for i := first; i < Points; i++ {
		want, wantBL := 20.0, int64(0)
		if i < first+30 {
			want, wantBL = 30, 4
		}
		if s.Achieved[i] != want || s.Backlog[i] != wantBL {
			t.Fatalf("step %d (minute %v): achieved %v, backlog %d; want %v, %d", i, float64(i-first)/6, s.Achieved[i], s.Backlog[i], want, wantBL)
		}
	}
	if s.Achieved[first-1] != 0 {
		t.Errorf("before either replica sent: %v msgs/s", s.Achieved[first-1])
	}
}

// Flush writes only the keys whose points changed: an idle key once (its
// last changes), then no more; a key idle for an hour is dropped.
func TestFlushWritesWhatChanged(t *testing.T) {
	r := NewRecorder(10)
	r.Add("busy", t0, t0.Add(5*time.Second), 50, 0, 0)
	r.Add("idle", t0, t0.Add(5*time.Second), 0, 0, 0) // nothing: not kept
	if f, _ := r.Flush(t0.Add(5*time.Second), nil); len(f) != 2 || f[0] != "busy" {
		t.Fatalf("first Flush wrote %v; want busy alone", keysOf(f))
	}
	r.Add("busy", t0.Add(5*time.Second), t0.Add(10*time.Second), 0, 0, 0)
	if f, _ := r.Flush(t0.Add(10*time.Second), nil); len(f) != 0 {
		t.Fatalf("a reading with nothing wrote %v", keysOf(f))
	}
	at := t0.Add(Span + 10*time.Second)
	r.Add("busy", at.Add(-5*time.Second), at, 0, 0, 0)
	f, gone := r.Flush(at, nil)
	if len(f) != 0 || len(gone) != 0 {
		t.Fatalf("an hour idle but read: wrote %v, dropped %v; want nothing (its last reading came now)", keysOf(f), gone)
	}
	f, gone = r.Flush(at.Add(Span), nil)
	if len(f) != 0 || len(gone) != 1 || gone[0] != "busy" || r.Len() != 0 {
		t.Fatalf("an hour without a reading: wrote %v, dropped %v, keeps %d; want busy dropped", keysOf(f), gone, r.Len())
	}
}

func keysOf(f []any) []any {
	var ks []any
	for i := 0; i < len(f); i += 2 {
		ks = append(ks, f[i])
	}
	return ks
}

// At its cap a Recorder keeps the most active keys: a new key busier in
// its first reading than a kept key was in its hour takes its place at
// the next Flush; a quieter one does not.
func TestRecorderKeepsTheMostActive(t *testing.T) {
	r := NewRecorder(2)
	at := t0.Add(5 * time.Second)
	r.Add("a", t0, at, 100, 0, 0)
	r.Add("b", t0, at, 3, 0, 0)
	r.Flush(at, nil)
	at2 := at.Add(5 * time.Second)
	r.Add("c", at, at2, 2, 0, 0) // quieter than b: waits, then not kept
	r.Add("d", at, at2, 0, 0, 50)
	f, gone := r.Flush(at2, nil)
	if fmt.Sprint(keysOf(f), gone) != "[d] [b]" || r.Len() != 2 {
		t.Fatalf("wrote %v, dropped %v, keeps %d; want d written instead of b, 2 kept", keysOf(f), gone, r.Len())
	}
	if _, pts, _ := Decode(f[1].(string)); len(pts) != 1 || pts[0].Backlog != 50 {
		t.Fatalf("d's points %v; want its reading's backlog of 50", pts)
	}
}

// The memory of a kept key: its ring (RingBytes, 12 bytes a point plus
// 16, in Go's 4,864-byte allocation class) and its map entry, measured on
// 1,000 keys busy for the whole hour;
// their entries in Redis are at most 5 bytes a point plus 12.
func TestRingBytes(t *testing.T) {
	if RingBytes != 12*Points+16 {
		t.Errorf("RingBytes %d, want %d", RingBytes, 12*Points+16)
	}
	const keys = 1000
	names := make([]string, keys)
	for i := range names {
		names[i] = fmt.Sprintf("1555%07d", i)
	}
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	r := NewRecorder(keys)
	for at := 5 * time.Second; at <= Span; at += 5 * time.Second {
		for _, k := range names {
			r.Add(k, t0.Add(at-5*time.Second), t0.Add(at), 400, 1, 1000)
		}
	}
	runtime.GC()
	runtime.ReadMemStats(&after)
	per := float64(after.HeapAlloc-before.HeapAlloc) / keys
	t.Logf("%.0f bytes a key kept (ring %d)", per, RingBytes)
	if per < float64(RingBytes) || per > 5000 {
		t.Errorf("%.0f bytes a key; want its ring (%d in a 4,864-byte allocation) and at most 136 for its map entry", per, RingBytes)
	}
	f, _ := r.Flush(t0.Add(Span), nil)
	if n := len(f[1].(string)); n > 5*Points+12 {
		t.Errorf("a busy key's entry is %d bytes; want at most %d", n, 5*Points+12)
	} else {
		t.Logf("a busy key's entry: %d bytes", n)
	}
	runtime.KeepAlive(r)
}

func TestDecodeRefusesBadEntries(t *testing.T) {
	r := NewRecorder(1)
	r.Add("k", t0, t0.Add(5*time.Second), 5, 0, 0)
	f, _ := r.Flush(t0.Add(5*time.Second), nil)
	good := f[1].(string)
	for _, c := range []struct{ in, want string }{
		{"", "not a version 1 encoding"},
		{"\x02" + good[1:], "not a version 1 encoding"},
		{good[:len(good)-1], "backlog cut short"},
		{good + "x", "1 bytes after the points"},
		{"\x01\x05\xe9\x02", "361 points, at most 360"},
	} {
		_, _, err := Decode(c.in)
		if err == nil || !errors.Is(err, errEncoding) || !strings.Contains(err.Error(), c.want) {
			t.Errorf("Decode(%q): %v; want an error saying %q", c.in, err, c.want)
		}
	}
	if _, err := Merge(Slot(t0), []string{good, "junk"}); err == nil {
		t.Errorf("Merge took an entry that does not decode")
	}
}
