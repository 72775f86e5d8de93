package fakeprovider

import (
	"context"
	"testing"
	"testing/synctest"
	"time"
)

func TestSleep(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		start := time.Now()
		if !Sleep(t.Context(), 0) || time.Since(start) != 0 {
			t.Error("Sleep(0) waited or failed")
		}
		if !Sleep(t.Context(), time.Second) || time.Since(start) != time.Second {
			t.Errorf("Sleep(1s) took %v", time.Since(start))
		}
		ctx, cancel := context.WithTimeout(t.Context(), 100*time.Millisecond)
		defer cancel()
		if Sleep(ctx, time.Second) || time.Since(start) != 1100*time.Millisecond {
			t.Errorf("cancelled Sleep reported true or took %v", time.Since(start))
		}
	})
}
