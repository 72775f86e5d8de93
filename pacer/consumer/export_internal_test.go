package consumer

import (
	"bytes"
	"sync"
)

// SyncBuffer is a bytes.Buffer safe for a log's concurrent writers, for
// this package's tests and its external ones (consumer_test).
type SyncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (b *SyncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.Write(p)
}

func (b *SyncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.String()
}
