package pacer

import (
	"fmt"
	"strings"
	"testing"
	"unsafe"

	"github.com/pacerhq/pacer/bucket"
)

// The key map holds its own copies of the keys, side by side in shared
// blocks, not the strings of the records that brought them (each made
// among that record's garbage); a key too long for a block is copied
// alone.
func TestKeysCopiedTogether(t *testing.T) {
	p := testPacer(t, bucket.NewLocal(bucket.LocalConfig{}), &stubAdapter{}, nil)
	long := strings.Repeat("x", keyTextMax+1)
	keys := []string{fmt.Sprintf("2065%07d", 1), fmt.Sprintf("2065%07d", 2), fmt.Sprintf("2065%07d", 3), long}
	for _, k := range keys {
		p.keyState(k).done()
	}
	held := map[string]string{}
	for k := range p.keys.m {
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
	if cap(p.keys.text) != keyTextBlock {
		t.Errorf("block of %d bytes, want %d", cap(p.keys.text), keyTextBlock)
	}
	if got := len(p.keys.text); got != 3*11 {
		t.Errorf("%d bytes of the block used, want 33 (the long key copied alone)", got)
	}

	// A key that does not fit in what is left of the block starts a new one.
	p.keys.text = p.keys.text[:keyTextBlock-5]
	k := fmt.Sprintf("2065%07d", 4)
	p.keyState(k).done()
	if len(p.keys.text) != 11 {
		t.Errorf("after a key that did not fit: %d bytes of the block used, want 11 (a new block)", len(p.keys.text))
	}
	for h := range p.keys.m {
		if h == k && unsafe.StringData(h) != unsafe.SliceData(p.keys.text) {
			t.Error("the key is not at the start of the new block")
		}
	}
}
