package consumer

import (
	"fmt"
	"strconv"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/pacerhq/pacer/pacer/envelope"
	"github.com/pacerhq/pacer/pacer/park"
	"github.com/twmb/franz-go/pkg/kgo"
)

// TestParkCopy: a parked copy goes to the tier with the longest delay not
// above its wait and is due after that delay (or its wait, if shorter), so a
// tier's records fall due in the order they were written; attempts and
// requeues are unchanged and pacer-parks counts the hops.
func TestParkCopy(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		p := &Pacer{cfg: Config{Topic: "t", RetryDelays: []time.Duration{5 * time.Second, 30 * time.Second, 5 * time.Minute}}}
		r := &kgo.Record{Topic: "t", Partition: 3, Offset: 7, Key: []byte("k"), Value: []byte("v"), Headers: []kgo.RecordHeader{
			{Key: "trace", Value: []byte("x")}, {Key: envelope.HeaderAttempt, Value: []byte("2")}, {Key: envelope.HeaderRequeues, Value: []byte("1")}, {Key: envelope.HeaderParks, Value: []byte("4")},
		}}
		now := time.Now()
		for _, c := range []struct {
			wait  time.Duration
			topic string
			due   time.Duration
		}{
			{3 * time.Second, "t.retry.1", 3 * time.Second},
			{7 * time.Second, "t.retry.1", 5 * time.Second},
			{45 * time.Second, "t.retry.2", 30 * time.Second},
			{5 * time.Minute, "t.retry.3", 5 * time.Minute},
			{20 * time.Minute, "t.retry.3", 5 * time.Minute},
		} {
			got, _ := p.parkCopy(r, now.Add(c.wait), 0)
			due, _ := strconv.ParseInt(envelope.Header(got, envelope.HeaderDue), 10, 64)
			if got.Topic != c.topic || time.UnixMilli(due) != now.Add(c.due) {
				t.Errorf("wait %v: %s due in %v, want %s due in %v", c.wait, got.Topic, time.UnixMilli(due).Sub(now), c.topic, c.due)
			}
			// The copy carries its slot: parked again, it is due at the
			// same slot, however often it hops.
			if slot, ok := park.SlotOf(got); !ok || !slot.Equal(now.Add(c.wait)) {
				t.Errorf("wait %v: pacer-slot %v (%v), want %v", c.wait, slot, ok, now.Add(c.wait))
			}
			for k, want := range map[string]string{envelope.HeaderAttempt: "2", envelope.HeaderRequeues: "1", envelope.HeaderParks: "5", "trace": "x", envelope.HeaderOrigin: "t/3/7"} {
				if v := envelope.Header(got, k); v != want {
					t.Errorf("wait %v: header %s = %q, want %q", c.wait, k, v, want)
				}
			}
			if string(got.Key) != "k" || string(got.Value) != "v" {
				t.Errorf("key/value changed: %q %q", got.Key, got.Value)
			}
		}
	})
}

// slotDue is the due time of w.slotAfter(q, now).
func slotDue(w *worker, q *keyQueue, now time.Time) time.Time {
	due, _ := w.slotAfter(q, now)
	return due
}

// TestSlotAfter: parked records of a key at 20 msgs/s are due one slot
// (50 ms) apart, after the records the key holds, and never before a slot
// already given out, even once time has moved on.
func TestSlotAfter(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		w := &worker{}
		q := &keyQueue{rate: 20, running: 2, waiting: make([]*kgo.Record, 8)}
		now := time.Now()
		var got []time.Duration
		for range 3 {
			got = append(got, slotDue(w, q, now).Sub(now))
		}
		want := []time.Duration{500 * time.Millisecond, 550 * time.Millisecond, 600 * time.Millisecond}
		for i := range want {
			if got[i] != want[i] {
				t.Fatalf("slots %v, want %v", got, want)
			}
		}
		time.Sleep(100 * time.Millisecond) // the key still holds 10: the next slot follows the last given
		if d := slotDue(w, q, time.Now()).Sub(now); d != 650*time.Millisecond {
			t.Errorf("after 100 ms: due %v from the start, want 650ms", d)
		}
		time.Sleep(2 * time.Second) // all given slots passed: from the held records again
		if d := slotDue(w, q, time.Now()).Sub(time.Now()); d != 500*time.Millisecond {
			t.Errorf("after 2 s: due in %v, want 500ms", d)
		}
		// A key whose adapted rate fell to 10/s is estimated at its
		// ceiling of 20/s: its parked records come back no later than
		// the key, recovering, can send them.
		q2 := &keyQueue{rate: 10, ceil: 20, running: 2, waiting: make([]*kgo.Record, 8)}
		if due, rate := w.slotAfter(q2, time.Now()); due.Sub(time.Now()) != 500*time.Millisecond || rate != 20 {
			t.Errorf("adapted 10/s, ceiling 20/s: due in %v estimated at %v/s, want 500ms at 20/s", due.Sub(time.Now()), rate)
		}
	})
}

// TestRereadCarriedToCopies: a record read again by its partition's next
// owner (pacer-reread) keeps the mark on its parked, chained and retry
// copies, and a duplicate of it, or of a DLQ-replayed record, or of a
// record with no campaign, is not counted as its campaign published again;
// a first reading, or a copy of one, is.
func TestRereadCarriedToCopies(t *testing.T) {
	p := &Pacer{cfg: Config{Topic: "t", RetryDelays: []time.Duration{5 * time.Second}}}
	fresh := &kgo.Record{Topic: "t", Partition: 1, Offset: 9, Key: []byte("k"), Value: []byte("v")}
	reread := &kgo.Record{Topic: "t", Partition: 1, Offset: 9, Key: []byte("k"), Value: []byte("v"),
		Headers: []kgo.RecordHeader{{Key: envelope.HeaderReread, Value: []byte("1")}}}
	chainOf := &chain{token: "o-1"}
	for _, c := range []struct {
		name string
		copy func(r *kgo.Record) *kgo.Record
	}{
		{"parked", func(r *kgo.Record) *kgo.Record { c, _ := p.parkCopy(r, time.Now().Add(time.Second), 0); return c }},
		{"chained", func(r *kgo.Record) *kgo.Record { return p.chainCopy(r, chainOf) }},
		{"retry", func(r *kgo.Record) *kgo.Record {
			m := readMeta(r)
			m.attempt++
			return &kgo.Record{Headers: m.headers(r)}
		}},
	} {
		if got := envelope.Header(c.copy(reread), envelope.HeaderReread); got != "1" {
			t.Errorf("%s copy of a record read again: pacer-reread %q, want 1", c.name, got)
		}
		if got := envelope.Header(c.copy(fresh), envelope.HeaderReread); got != "" {
			t.Errorf("%s copy of a first reading: pacer-reread %q, want none", c.name, got)
		}
		cp := c.copy(fresh)
		if f := (&flight{r: cp, m: readMeta(cp), env: envelope.Envelope{Campaign: "spring"}}); !p.republished(f) {
			t.Errorf("%s copy of a first reading: not counted as published again", c.name)
		}
	}
	for _, c := range []struct {
		name string
		r    *kgo.Record
		camp string
		want bool
	}{
		{"first reading", fresh, "spring", true},
		{"read again", reread, "spring", false},
		{"no campaign", fresh, "", false},
		{"replayed", &kgo.Record{Topic: "t", Headers: []kgo.RecordHeader{{Key: envelope.HeaderReplayed, Value: []byte("1")}}}, "spring", false},
	} {
		if got := p.republished(&flight{r: c.r, m: readMeta(c.r), env: envelope.Envelope{Campaign: c.camp}}); got != c.want {
			t.Errorf("%s: republished %v, want %v", c.name, got, c.want)
		}
	}
}

// TestParkRateOnlyOnParkedCopies: the rate header is read back as written,
// and a later copy of the record (a deferral, a retry: meta.headers) drops
// it, so only a copy parked for its key's lookahead is ever taken early.
func TestParkRateOnlyOnParkedCopies(t *testing.T) {
	r := &kgo.Record{Topic: "t", Key: []byte("k"), Headers: []kgo.RecordHeader{park.RateHeader(48.5), {Key: "trace", Value: []byte("x")}}}
	if got := park.RateOf(r); got != 48.5 {
		t.Fatalf("park.RateOf = %v, want 48.5", got)
	}
	p := &Pacer{cfg: Config{Topic: "t", RetryDelays: []time.Duration{5 * time.Second, 30 * time.Second}}}
	c, _ := p.parkCopy(r, time.Now().Add(5*time.Second), 0)
	if got := park.RateOf(c); got != 0 {
		t.Errorf("a deferred copy kept the park rate %v", got)
	}
	// A copy parked for its key's lookahead carries the rate its slot was
	// estimated at (80), whatever rate the key has when it is written.
	if c, _ := p.parkCopy(r, time.Now().Add(5*time.Second), 80); park.RateOf(c) != 80 || strings.Count(fmt.Sprint(c.Headers), envelope.HeaderParkRate) != 1 {
		t.Errorf("parked at 80/s: park rate %v in headers %v, want 80 once", park.RateOf(c), c.Headers)
	}
	if envelope.Header(c, "trace") != "x" {
		t.Errorf("the producer's header was dropped")
	}
	for _, v := range []string{"", "0", "-3", "fast"} {
		if got := park.RateOf(&kgo.Record{Headers: []kgo.RecordHeader{{Key: envelope.HeaderParkRate, Value: []byte(v)}}}); got != 0 {
			t.Errorf("park rate %q read as %v, want 0", v, got)
		}
	}
}

// TestSlotAfterRaise: a key at 20 msgs/s parked 200 records up to 9.95 s
// ahead; raised to 100 msgs/s, the next parked record is due after the
// earlier ones at the new rate (2 s), not after the 10 s estimated at the
// old one.
func TestSlotAfterRaise(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		w := &worker{}
		q := &keyQueue{rate: 20}
		now := time.Now()
		for range 200 {
			w.slotAfter(q, now)
		}
		if d := q.parkedUntil.Sub(now); d != 9950*time.Millisecond {
			t.Fatalf("200 parked at 20/s: the last due in %v, want 9.95s", d)
		}
		q.rate = 100
		if d := slotDue(w, q, now).Sub(now); d != 2*time.Second {
			t.Errorf("after the raise to 100/s: next parked due in %v, want 2s (1.99 s of records ahead, then 10 ms)", d)
		}
	})
}

// TestParkCopyOnLanes: a copy that would hop through the tiers goes to a
// park lane of its partition once the lane is known, due a lookahead before
// its slot (a parked copy, rate > 0) or at it (a deferral); a copy that
// comes back from its tier at its slot stays on the tier, and so does
// every copy while the partition's lanes are unknown. A second backlog
// due sooner than the first lane's horizon takes the next lane.
func TestParkCopyOnLanes(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		p := &Pacer{cfg: Config{Topic: "t", Lookahead: 5 * time.Second,
			RetryDelays: []time.Duration{5 * time.Second, 30 * time.Second, 5 * time.Minute}},
			lanes: park.NewLanes(5 * time.Second)}
		r := &kgo.Record{Topic: "t", Partition: 3, Offset: 7, Key: []byte("k"), Value: []byte("v")}
		now := time.Now()
		check := func(name string, wait time.Duration, rate float64, topic string, due time.Duration) {
			t.Helper()
			got, _ := p.parkCopy(r, now.Add(wait), rate)
			ms, _ := strconv.ParseInt(envelope.Header(got, envelope.HeaderDue), 10, 64)
			if got.Topic != topic || time.UnixMilli(ms) != now.Add(due) {
				t.Errorf("%s: wait %v: %s due in %v, want %s due in %v", name, wait, got.Topic, time.UnixMilli(ms).Sub(now), topic, due)
			}
		}
		for n := 1; n <= park.LaneCount; n++ {
			p.lanes.Assigned(n, 3)
		}
		check("lanes unknown", 20*time.Minute, 80, "t.retry.3", 5*time.Minute)
		p.lanes.Empty(1, 3)
		p.lanes.Empty(2, 3)
		check("back at its slot from tier 1", 3*time.Second, 80, "t.retry.1", 3*time.Second)
		check("a deferral back at its due time from tier 2", 30*time.Second, 0, "t.retry.2", 30*time.Second)
		check("a backlog's copy", 20*time.Minute, 80, "t.park.1", 20*time.Minute-5*time.Second)
		check("the next of that backlog", 21*time.Minute, 80, "t.park.1", 21*time.Minute-5*time.Second)
		check("a second backlog, due sooner", 2*time.Minute, 80, "t.park.2", 2*time.Minute-5*time.Second)
		check("a not_before", 40*time.Minute, 0, "t.park.1", 40*time.Minute)
		check("no lane takes it", 10*time.Second, 80, "t.retry.1", 5*time.Second)
	})
}
