package consumer

import (
	"time"

	"github.com/pacerhq/pacer/internal/testenv"
)

// SyncBuffer is a log buffer safe for concurrent writers, for this
// package's tests and its external ones (consumer_test).
type SyncBuffer = testenv.SyncBuffer

// SetQualityRecheck sets how long a marketing message of a paused
// portfolio is parked, for the test's duration.
func SetQualityRecheck(t interface{ Cleanup(func()) }, d time.Duration) {
	old := qualityRecheck
	qualityRecheck = d
	t.Cleanup(func() { qualityRecheck = old })
}
