package ledger_test

import (
	"context"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/pacerhq/pacer/internal/redistest"
	"github.com/pacerhq/pacer/pacer/ledger"
	"github.com/redis/go-redis/v9"
)

// incr is a Rider that adds INCR key to the flush's pipeline and, once it
// ran, sends its reply (or error) to got.
func incr(key string, got chan<- any) ledger.Rider {
	return func(ctx context.Context, pipe redis.Pipeliner) func() {
		cmd := pipe.Incr(ctx, key)
		return func() {
			if err := cmd.Err(); err != nil {
				got <- err
				return
			}
			got <- cmd.Val()
		}
	}
}

// TestBatcherRide: two riders queued with a claim go in the claim's flush
// (one round trip for the three) and are answered after it ran; a flush
// that fails answers the rider its error; after Close a rider runs at
// once, in a pipeline of its own.
func TestBatcherRide(t *testing.T) {
	for name, s := range servers(t) {
		t.Run(name, func(t *testing.T) {
			ctx := t.Context()
			// Trips that run the ledger's script or a rider's INCR, not a new
			// connection's handshake.
			trips := &redistest.Trips{Match: func(cmds []redis.Cmder, _ bool, _ error) bool {
				return slices.ContainsFunc(cmds, func(c redis.Cmder) bool { return c.Name() == "evalsha" || c.Name() == "eval" || c.Name() == "incr" })
			}}
			s.rdb.AddHook(trips)
			b := ledger.NewBatcher(s.rdb, s.keys, ledger.BatchConfig{FlushInterval: time.Hour})
			warm := b.ClaimAsync("whatsapp", "106", "m0", "a", false) // the script into Redis's cache
			b.Flush()
			if _, _, err := warm.Wait(ctx); err != nil {
				t.Fatal(err)
			}
			pc := b.ClaimAsync("whatsapp", "106", "m1", "a", false)
			got := make(chan any, 3)
			b.Ride(incr(s.keys.Prefix()+":r1", got))
			b.Ride(incr(s.keys.Prefix()+":r2", got))
			select {
			case v := <-got:
				t.Fatalf("a rider answered %v before any flush", v)
			default:
			}
			base := trips.Load()
			b.Flush()
			if r, _, err := pc.Wait(ctx); err != nil || r != ledger.Claimed {
				t.Fatalf("claim: %v %v; want claimed", r, err)
			}
			for i := range 2 {
				if v := <-got; v != int64(1) {
					t.Fatalf("rider %d answered %v; want 1 (its INCR)", i, v)
				}
			}
			if n := trips.Load() - base; n != 1 {
				t.Errorf("the claim and two riders took %d round trips; want 1", n)
			}
			closeBatcher(t, b)
			b.Ride(incr(s.keys.Prefix()+":r1", got))
			select {
			case v := <-got:
				if v != int64(2) {
					t.Errorf("rider after Close answered %v; want 2", v)
				}
			default:
				t.Error("a rider after Close was not answered before Ride returned")
			}
		})
	}
	t.Run("failed flush", func(t *testing.T) {
		s := servers(t)["miniredis"]
		rdb := redis.NewClient(&redis.Options{Addr: s.rdb.Options().Addr})
		b := ledger.NewBatcher(rdb, s.keys, ledger.BatchConfig{FlushInterval: time.Hour})
		defer closeBatcher(t, b)
		rdb.Close()
		got := make(chan any, 1)
		b.Ride(incr("r", got))
		b.Flush()
		if err, ok := (<-got).(error); !ok || !strings.Contains(err.Error(), "closed") {
			t.Errorf("rider of a failed flush answered %v; want the client's error (closed)", err)
		}
	})
}
