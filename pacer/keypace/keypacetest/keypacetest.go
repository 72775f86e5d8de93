// Package keypacetest holds a stand-in for keypace's Adapter and a heap
// reading, shared by the tests of keypace and of the consumer that drives
// it. It is imported only by _test.go files.
package keypacetest

import (
	"context"
	"runtime"
	"sync"
	"time"

	"github.com/pacerhq/pacer/bucket"
	"github.com/pacerhq/pacer/bucket/adapt"
)

// Adapter is a keypace.Adapter that answers RecoverAfter and Adapted with
// the ceiling as the adapted rate, and reports no throttled pairs and a
// closed breaker. While Block is non-nil, RecoverAfter closes Entered and
// waits until Block is closed; Calls counts its calls. Set Block, Entered
// and read Calls under Mu. The other methods panic: a test that needs them
// embeds Adapter and defines them.
type Adapter struct {
	Mu             sync.Mutex
	Block, Entered chan struct{}
	Calls          int
}

func (a *Adapter) RecoverAfter(_ context.Context, _, _ string, ceiling bucket.Limit, _ adapt.AIMD, _ int) (adapt.Adapted, error) {
	a.Mu.Lock()
	a.Calls++
	block, entered := a.Block, a.Entered
	a.Mu.Unlock()
	if block != nil {
		close(entered)
		<-block
	}
	return adapt.Adapted{Rate: ceiling.PerSecond, Ceiling: ceiling.PerSecond}, nil
}

func (a *Adapter) Adapted(_ context.Context, _, _ string, ceiling bucket.Limit, _ adapt.AIMD) (adapt.Adapted, error) {
	return adapt.Adapted{Rate: ceiling.PerSecond, Ceiling: ceiling.PerSecond}, nil
}

func (a *Adapter) Pairs(context.Context, string, string) (map[string]adapt.Pair, error) {
	return nil, nil
}

func (a *Adapter) BreakerStatus(context.Context, string, string) (adapt.BreakerStatus, error) {
	return adapt.BreakerStatus{}, nil
}

func (a *Adapter) ThrottledAfter(context.Context, string, string, bucket.Limit, adapt.AIMD, time.Duration, int, float64) (adapt.Adapted, error) {
	panic("keypacetest.Adapter: ThrottledAfter is not stubbed")
}

func (a *Adapter) PairThrottled(context.Context, string, string, string, time.Duration, time.Duration, float64) (adapt.Pair, error) {
	panic("keypacetest.Adapter: PairThrottled is not stubbed")
}

func (a *Adapter) BreakerAllow(context.Context, string, string, adapt.Breaker, string) (bool, bool, time.Duration, error) {
	panic("keypacetest.Adapter: BreakerAllow is not stubbed")
}

func (a *Adapter) BreakerResult(context.Context, string, string, adapt.Breaker, bool, string) (adapt.BreakerState, error) {
	panic("keypacetest.Adapter: BreakerResult is not stubbed")
}

// HeapAfterGC is the heap in use by live objects, in bytes, after two
// full collections: what tests of the memory an active key holds read.
func HeapAfterGC() uint64 {
	var ms runtime.MemStats
	runtime.GC()
	runtime.GC()
	runtime.ReadMemStats(&ms)
	return ms.HeapAlloc
}
