package main

import (
	"context"
	"encoding/hex"
	"fmt"
	"math"
	"time"

	"github.com/pacerhq/pacer/channels"
	"github.com/pacerhq/pacer/channels/apns"
	"github.com/pacerhq/pacer/channels/apns/apnstest"
	"github.com/pacerhq/pacer/channels/fcm"
	"github.com/pacerhq/pacer/channels/fcm/fcmtest"
	"github.com/pacerhq/pacer/channels/sendgrid"
	"github.com/pacerhq/pacer/channels/sendgrid/sendgridtest"
	"github.com/pacerhq/pacer/channels/whatsapp"
	"github.com/pacerhq/pacer/channels/whatsapp/whatsapptest"
)

// fakeStats is what the demo reads from any fake provider, per pacing key.
type fakeStats struct {
	Delivered, Duplicates, Throttled, Max1s int
	First, Last                             time.Time
}

// demoProvider is one channel's fake provider and the adapter pointed at it.
type demoProvider struct {
	url    string
	sender channels.Sender
	keys   []string                    // pacing keys of the campaign
	line   func(n, i int) string       // envelope for message i of key n
	stats  func() map[string]fakeStats // per pacing key
	close  func()
}

// newDemoProvider starts channel's fake, enforcing rate with burst (plus
// 100 ms of jitter allowance), and the adapter that sends to it.
func newDemoProvider(ctx context.Context, channel string, numbers, messages int, rate float64, burst int) (*demoProvider, error) {
	fakeBurst := burst + int(math.Ceil(rate/10))
	d := &demoProvider{keys: make([]string, numbers)}
	switch channel {
	case "whatsapp":
		f := whatsapptest.NewServer(whatsapptest.Config{Rate: rate, Burst: fakeBurst, Token: "demo-token"})
		s, err := whatsapp.New(whatsapp.Config{BaseURL: f.URL(), Token: "demo-token"})
		if err != nil {
			f.Close()
			return nil, err
		}
		for n := range d.keys {
			d.keys[n] = fmt.Sprintf("1065403522%05d", n+1)
		}
		d.line = func(n, i int) string {
			return fmt.Sprintf(`{"id":"demo-%d-%d","key":%q,"to":"1555%07d","campaign":"demo","payload":{"type":"text","text":{"body":"hello %d"}}}`,
				n+1, i+1, d.keys[n], n*messages+i, i+1)
		}
		d.url, d.sender, d.close = f.URL(), s, f.Close
		d.stats = func() map[string]fakeStats {
			return statsOf(f.Stats(), func(v whatsapptest.KeyStats) fakeStats {
				return fakeStats{v.Delivered, v.Duplicates, v.Throttled, v.Max1s, v.First, v.Last}
			})
		}
	case "sendgrid":
		keys := map[string]string{}
		for n := range d.keys {
			d.keys[n] = fmt.Sprintf("account-%d", n+1)
			keys[d.keys[n]] = fmt.Sprintf("SG.demo-secret-%d", n+1)
		}
		f := sendgridtest.NewServer(sendgridtest.Config{Rate: rate, Burst: fakeBurst, APIKeys: keys})
		s, err := sendgrid.New(sendgrid.Config{BaseURL: f.URL(), APIKeys: keys})
		if err != nil {
			f.Close()
			return nil, err
		}
		d.line = func(n, i int) string {
			return fmt.Sprintf(`{"id":"demo-%d-%d","key":%q,"to":"user%d@example.com","campaign":"demo","payload":{"from":{"email":"news@example.com"},"subject":"Hello %d","content":[{"type":"text/plain","value":"hello"}]}}`,
				n+1, i+1, d.keys[n], n*messages+i, i+1)
		}
		d.url, d.sender, d.close = f.URL(), s, f.Close
		d.stats = func() map[string]fakeStats {
			return statsOf(f.Stats(), func(v sendgridtest.KeyStats) fakeStats {
				return fakeStats{v.Delivered, v.Duplicates, v.Throttled, v.Max1s, v.First, v.Last}
			})
		}
	case "fcm":
		f := fcmtest.NewServer(fcmtest.Config{Rate: rate, Burst: fakeBurst})
		s, err := fcm.New(ctx, fcm.Config{BaseURL: f.URL(), CredentialsJSON: f.ServiceAccountJSON(), DataIDKey: "pacer_id"})
		if err != nil {
			f.Close()
			return nil, err
		}
		for n := range d.keys {
			d.keys[n] = fmt.Sprintf("demo-project-%d", n+1)
		}
		d.line = func(n, i int) string {
			return fmt.Sprintf(`{"id":"demo-%d-%d","key":%q,"to":"device-token-%07d","campaign":"demo","payload":{"notification":{"title":"Hello","body":"message %d"}}}`,
				n+1, i+1, d.keys[n], n*messages+i, i+1)
		}
		d.url, d.sender, d.close = f.URL(), s, f.Close
		d.stats = func() map[string]fakeStats {
			return statsOf(f.Stats(), func(v fcmtest.KeyStats) fakeStats {
				return fakeStats{v.Delivered, v.Duplicates, v.Throttled, v.Max1s, v.First, v.Last}
			})
		}
	case "apns":
		p8, pub, err := apnstest.NewKey()
		if err != nil {
			return nil, err
		}
		f := apnstest.NewServer(apnstest.Config{Rate: rate, Burst: fakeBurst, PublicKey: pub})
		s, err := apns.New(apns.Config{BaseURL: f.URL(), KeyID: "DEMOKEY123", TeamID: "DEMOTEAM12", PrivateKey: p8, HTTPClient: f.Client()})
		if err != nil {
			f.Close()
			return nil, err
		}
		for n := range d.keys {
			d.keys[n] = fmt.Sprintf("com.example.demo%d", n+1)
		}
		d.line = func(n, i int) string {
			tok := hex.EncodeToString([]byte(fmt.Sprintf("device-%d-%025d", n, i)))
			return fmt.Sprintf(`{"id":"demo-%d-%d","key":%q,"to":%q,"campaign":"demo","payload":{"headers":{"apns-push-type":"alert"},"aps":{"alert":"hello %d"}}}`,
				n+1, i+1, d.keys[n], tok, i+1)
		}
		d.url, d.sender, d.close = f.URL(), s, f.Close
		d.stats = func() map[string]fakeStats {
			return statsOf(f.Stats(), func(v apnstest.KeyStats) fakeStats {
				return fakeStats{v.Delivered, v.Duplicates, v.Throttled, v.Max1s, v.First, v.Last}
			})
		}
	default:
		return nil, checkChannel(channel)
	}
	return d, nil
}

// statsOf converts a fake provider's per-key statistics with conv.
func statsOf[T any](m map[string]T, conv func(T) fakeStats) map[string]fakeStats {
	out := make(map[string]fakeStats, len(m))
	for k, v := range m {
		out[k] = conv(v)
	}
	return out
}
