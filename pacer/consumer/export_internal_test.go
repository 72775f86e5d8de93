package consumer

import "github.com/pacerhq/pacer/internal/testenv"

// SyncBuffer is a log buffer safe for concurrent writers, for this
// package's tests and its external ones (consumer_test).
type SyncBuffer = testenv.SyncBuffer
