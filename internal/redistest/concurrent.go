package redistest

import (
	"sync"
	"sync/atomic"
	"testing"
)

// CountConcurrent runs call calls times on each of workers goroutines at
// once and returns how many calls reported true: what the atomicity tests
// of buckets, windows and AIMD compare with the limit. A call's error
// fails t (without stopping it) and ends that goroutine's calls.
func CountConcurrent(t testing.TB, workers, calls int, call func() (bool, error)) int64 {
	var n atomic.Int64
	var wg sync.WaitGroup
	for range workers {
		wg.Go(func() {
			for range calls {
				ok, err := call()
				if err != nil {
					t.Error(err)
					return
				}
				if ok {
					n.Add(1)
				}
			}
		})
	}
	wg.Wait()
	return n.Load()
}
