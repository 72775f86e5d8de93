package consumer

import (
	"context"
	"sync"
	"testing"
	"testing/synctest"
	"time"
)

// One handler of an envelope id at a time in a process: a second waits
// until the first is done; another id, or the same id of another key, does
// not wait; a waiter whose context ends gives up; no entry stays behind.
func TestLockID(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		p := &Pacer{ids: map[idRef]chan struct{}{}}
		ctx := t.Context()
		if !p.lockID(ctx, "k", "a") {
			t.Fatal("a free id was not taken")
		}
		if !p.lockID(ctx, "k", "b") || !p.lockID(ctx, "k2", "a") {
			t.Fatal("another id, or the same id of another key, waited")
		}
		var order []string
		var mu sync.Mutex
		var wg sync.WaitGroup
		for _, who := range []string{"second", "third"} {
			wg.Go(func() {
				if !p.lockID(ctx, "k", "a") {
					t.Errorf("%s: gave up", who)
					return
				}
				mu.Lock()
				order = append(order, who)
				mu.Unlock()
				time.Sleep(time.Second)
				p.unlockID("k", "a")
			})
		}
		synctest.Wait()
		if len(order) != 0 {
			t.Fatalf("took a held id: %v", order)
		}
		cctx, cancel := context.WithCancel(ctx)
		gaveUp := make(chan bool)
		go func() { gaveUp <- !p.lockID(cctx, "k", "a") }()
		synctest.Wait()
		cancel()
		if !<-gaveUp {
			t.Fatal("a waiter whose context ended took the id")
		}
		p.unlockID("k", "a")
		synctest.Wait()
		mu.Lock()
		if len(order) != 1 {
			t.Fatalf("after the first was done: %v holders; want 1", order)
		}
		mu.Unlock()
		wg.Wait()
		if len(order) != 2 {
			t.Fatalf("holders %v; want both, one after the other", order)
		}
		p.unlockID("k", "b")
		p.unlockID("k2", "a")
		if len(p.ids) != 0 {
			t.Fatalf("%d ids left held", len(p.ids))
		}
	})
}
