package consumer

import (
	"context"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/pacerhq/pacer/bucket"
	"github.com/pacerhq/pacer/pacer/envelope"
	"github.com/pacerhq/pacer/pacer/keypace/keypacetest"
	"github.com/pacerhq/pacer/pacer/ledger"
	"github.com/redis/go-redis/v9"
)

// A claim started ahead of its slot whose answer (claimed) comes as the
// worker stops is released when the record is not sent: the partition's
// next owner finds the id free, not claimed by a process that left it
// mid-send (which it would dead-letter as unknown-outcome).
func TestClaimAheadAnsweredAtStopIsReleased(t *testing.T) {
	rdb := redis.NewClient(&redis.Options{Addr: miniredis.RunT(t).Addr()})
	defer rdb.Close()
	keys := bucket.New(rdb, bucket.Config{}).Keys()
	led := ledger.NewBatcher(rdb, keys, ledger.BatchConfig{FlushInterval: time.Millisecond})
	p := testPacer(t, bucket.NewLocal(bucket.LocalConfig{}), &keypacetest.Adapter{}, nil)
	p.ledger, p.cfg.Owner = led, "owner-1"

	env := envelope.Envelope{Key: "k", ID: "id-1", To: "t"}
	ahead := led.ClaimAsync(p.cfg.Channel, env.Key, env.ID, p.cfg.Owner, false)
	if res, _, err := ahead.Wait(t.Context()); res != ledger.Claimed || err != nil {
		t.Fatalf("claim ahead = %v, %v; want claimed", res, err)
	}
	ctx, cancel := context.WithCancel(t.Context())
	cancel() // the worker stops as the answer arrives
	f := &flight{w: &worker{p: p, ctx: ctx}, env: env, ahead: ahead, log: p.log}
	o := p.claim(f)
	if o.kind != stopped {
		t.Fatalf("claim after the stop = %+v, want stopped", o)
	}
	if p.finish(f, o) {
		t.Fatal("a stopped record reported finished")
	}
	cctx, ccancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer ccancel()
	if err := led.Close(cctx); err != nil {
		t.Fatal(err)
	}
	st, err := ledger.New(rdb, keys, 0).Lookup(t.Context(), []ledger.Ref{{Channel: p.cfg.Channel, Key: env.Key, ID: env.ID}})
	if err != nil || st[0] != ledger.StateNone {
		t.Fatalf("id after the stop: %v, %v; want none (the claim released)", st, err)
	}
}
