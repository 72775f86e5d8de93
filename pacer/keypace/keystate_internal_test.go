package keypace

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"
	"unsafe"

	"github.com/pacerhq/pacer/bucket"
	"github.com/pacerhq/pacer/pacer/control"
	"github.com/pacerhq/pacer/pacer/keypace/keypacetest"
)

// The key map holds its own copies of the keys, side by side in shared
// blocks, not the strings of the records that brought them (each made
// among that record's garbage); a key too long for a block is copied
// alone.
func TestKeysCopiedTogether(t *testing.T) {
	p := localKeys(t, nil)
	long := strings.Repeat("x", keyTextMax+1)
	keys := []string{fmt.Sprintf("2065%07d", 1), fmt.Sprintf("2065%07d", 2), fmt.Sprintf("2065%07d", 3), long}
	for _, k := range keys {
		p.done(p.keyState(k))
	}
	held := map[string]string{}
	for k := range p.m {
		held[k] = k
	}
	for i, k := range keys {
		h, ok := held[k]
		if !ok {
			t.Fatalf("key %q not in the key map", k)
		}
		if unsafe.StringData(h) == unsafe.StringData(k) {
			t.Errorf("key %d: the map holds the caller's string, not a copy", i)
		}
	}
	for i := 1; i < 3; i++ {
		prev, cur := held[keys[i-1]], held[keys[i]]
		if unsafe.Pointer(unsafe.StringData(cur)) != unsafe.Add(unsafe.Pointer(unsafe.StringData(prev)), len(prev)) {
			t.Errorf("key %d not copied right after key %d in the block", i, i-1)
		}
	}
	if cap(p.text) != keyTextBlock {
		t.Errorf("block of %d bytes, want %d", cap(p.text), keyTextBlock)
	}
	if got := len(p.text); got != 3*11 {
		t.Errorf("%d bytes of the block used, want 33 (the long key copied alone)", got)
	}

	// A key that does not fit in what is left of the block starts a new one.
	p.text = p.text[:keyTextBlock-5]
	k := fmt.Sprintf("2065%07d", 4)
	p.done(p.keyState(k))
	if len(p.text) != 11 {
		t.Errorf("after a key that did not fit: %d bytes of the block used, want 11 (a new block)", len(p.text))
	}
	for h := range p.m {
		if h == k && unsafe.StringData(h) != unsafe.SliceData(p.text) {
			t.Error("the key is not at the start of the new block")
		}
	}
}

// refusingPolicy refuses every key's stored limit while refuse is set.
type refusingPolicy struct {
	control.Policy
	refuse bool
}

func (p *refusingPolicy) KeyPolicy(ctx context.Context, key string) (control.KeyPolicy, error) {
	if p.refuse {
		return control.KeyPolicy{}, fmt.Errorf("%w: rate \"fast\" is not a number", control.ErrInvalid)
	}
	return p.Policy.KeyPolicy(ctx, key)
}

// What few keys need (keyRare) is made when it is set and dropped once
// it is all zero again: a key whose first read a sender waited for, or
// whose stored limit was refused for a while, is back to the usual state
// with nothing more than any other key.
func TestKeyRareDroppedOnceUnused(t *testing.T) {
	pol := &refusingPolicy{}
	p := localKeys(t, pol)
	pol.Policy = p.policyDefault
	ctx := t.Context()
	st := p.keyState("k")
	defer p.done(st)

	// A sender waiting for the key's first read (see limitFor).
	st.mu.Lock()
	first := make(chan struct{})
	st.rareSet().first = first
	st.mu.Unlock()
	p.limitFor(ctx, time.Now(), "k", st, testLog)
	select {
	case <-first:
	default:
		t.Fatal("the first read's waiters were not released")
	}
	if st.rare != nil {
		t.Errorf("after the first read: %+v kept, want nil", *st.rare)
	}

	// A refused limit is remembered (logged once) until a valid one is read.
	pol.refuse = true
	st.refreshed = instantOf(time.Now().Add(-2 * refreshEvery))
	p.limitFor(ctx, time.Now(), "k", st, testLog)
	if st.rare == nil || st.rare.refused == "" {
		t.Fatalf("a refused limit was not remembered: %+v", st.rare)
	}
	pol.refuse = false
	st.refreshed = instantOf(time.Now().Add(-2 * refreshEvery))
	p.limitFor(ctx, time.Now(), "k", st, testLog)
	if st.rare != nil {
		t.Errorf("after a valid limit: %+v kept, want nil", *st.rare)
	}

	// A pair throttle keeps the pair's state, not the rest.
	st.setPair("sub", time.Minute, 0)
	if st.rare == nil || st.pairs() == nil || st.rare.first != nil || st.rare.refused != "" {
		t.Fatalf("after a pair throttle: %+v", st.rare)
	}
}

// A key's dispenser is kept while the limit and the lateness its ceiling
// gives (lateSlot) stay the same, and replaced, its unused slots given
// back, when either changes.
func TestDispenserFollowsLimitAndLateness(t *testing.T) {
	b := bucket.NewLocal(bucket.LocalConfig{})
	p := testKeys(t, b, &keypacetest.Adapter{}, nil)
	ctx := t.Context()
	st := p.keyState("k")
	defer p.done(st)
	lim := bucket.Limit{PerSecond: 10, Burst: 2}
	narrow := bucket.Limit{PerSecond: 10, Burst: 2} // no headroom: lateSlot's floor
	wide := bucket.Limit{PerSecond: 10, Burst: 10}  // 8 slots of headroom: 0.4 s
	if lateSlot(narrow, lim) == lateSlot(wide, lim) {
		t.Fatal("the two ceilings give the same lateness: the test needs them apart")
	}
	d := st.dispenser(ctx, p, "k", narrow, lim, 4)
	if d.Late() != lateSlot(narrow, lim) {
		t.Errorf("lateness %v, want %v", d.Late(), lateSlot(narrow, lim))
	}
	if again := st.dispenser(ctx, p, "k", narrow, lim, 4); again != d {
		t.Error("same limit and ceiling: a new dispenser")
	}
	same := bucket.Limit{PerSecond: 10, Burst: 1} // another ceiling, the same lateness
	if lateSlot(same, lim) != lateSlot(narrow, lim) {
		t.Fatal("lateSlot changed: pick another ceiling of the same lateness")
	}
	if again := st.dispenser(ctx, p, "k", same, lim, 4); again != d {
		t.Error("a ceiling of the same lateness: a new dispenser")
	}
	w := st.dispenser(ctx, p, "k", wide, lim, 4)
	if w == d || w.Late() != lateSlot(wide, lim) {
		t.Errorf("a ceiling of another lateness: same dispenser %v, lateness %v (want %v)", w == d, w.Late(), lateSlot(wide, lim))
	}
	if l := st.dispenser(ctx, p, "k", wide, bucket.Limit{PerSecond: 5, Burst: 1}, 4); l == w || l.Limit().PerSecond != 5 {
		t.Errorf("another limit: same dispenser %v, limit %v", l == w, l.Limit())
	}
}
