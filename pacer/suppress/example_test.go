package suppress_test

import (
	"context"
	"fmt"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/pacerhq/pacer/bucket"
	"github.com/pacerhq/pacer/pacer/suppress"
	"github.com/redis/go-redis/v9"
)

// A status-webhook receiver suppresses what the provider reported, each
// for its reason's time: a WhatsApp 131026 for 7 days, a SendGrid bounce
// until removed. The pacer's claims then refuse those recipients.
func ExampleStore_Add() {
	mr := miniredis.NewMiniRedis()
	if err := mr.Start(); err != nil {
		panic(err)
	}
	defer mr.Close()
	rdb := redis.NewClient(&redis.Options{Addr: mr.Addr()})
	defer rdb.Close()
	st := suppress.NewStore(rdb, bucket.NewKeys(""))
	ctx, now := context.Background(), time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)

	st.Add(ctx, "whatsapp", "106540352242922", suppress.New(suppress.Hash("+15551234567"), suppress.Undeliverable, time.Time{}, now))
	st.Add(ctx, "sendgrid", "marketing", suppress.New(suppress.Hash("a@example.com"), suppress.Bounce, now, now))

	e, ok, _ := st.Get(ctx, "whatsapp", "106540352242922", suppress.Hash("+15551234567"), now)
	fmt.Println(ok, e.Reason, e.Expires.Format(time.DateOnly))
	_, ok, _ = st.Get(ctx, "whatsapp", "106540352242922", suppress.Hash("+15551234567"), now.Add(8*24*time.Hour))
	fmt.Println(ok)
	e, ok, _ = st.Get(ctx, "sendgrid", "marketing", suppress.Hash("a@example.com"), now.Add(365*24*time.Hour))
	fmt.Println(ok, e.Reason, e.Expires.IsZero())
	// Output:
	// true undeliverable 2030-01-08
	// false
	// true bounce true
}
