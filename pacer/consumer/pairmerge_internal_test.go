package consumer

import (
	"testing"
	"time"

	"github.com/pacerhq/pacer/bucket/adapt"
)

// A refresh's read of the pairs in Redis that began before this process
// learned a pair's rate from its own throttle keeps that rate (the read may
// predate the throttle's write); a rate learned before the read began and
// absent from it is gone (expired in Redis), and the read's rates replace
// the others.
func TestPairMergeKeepsRatesLearnedDuringTheRead(t *testing.T) {
	st := &keyState{}
	st.setPair("old", time.Second, 0.5) // learned before the read began
	began := time.Now().Add(time.Millisecond)
	time.Sleep(2 * time.Millisecond)
	st.setPair("new", time.Second, 1) // learned while the read was on its way
	now := time.Now()
	st.pairs().merge(map[string]adapt.Pair{"read": {Rate: 0.25, Left: 0}}, began, now)
	if r := st.pairRate("new"); r != 1 {
		t.Errorf("rate learned during the read: %v, want 1 kept", r)
	}
	if r := st.pairRate("old"); r != 0 {
		t.Errorf("rate learned before the read and not in it: %v, want 0 (gone from Redis)", r)
	}
	if r := st.pairRate("read"); r != 0.25 {
		t.Errorf("rate read: %v, want 0.25", r)
	}
	// The next read, which began after, has it or not: Redis decides.
	st.pairs().merge(map[string]adapt.Pair{}, now.Add(time.Millisecond), now.Add(time.Second))
	if r := st.pairRate("new"); r != 0 {
		t.Errorf("rate absent from a read that began after it was learned: %v, want 0", r)
	}
	if st.pairs().rateAt != nil {
		t.Errorf("rateAt %v, want nil once no rate is kept", st.pairs().rateAt)
	}
}
