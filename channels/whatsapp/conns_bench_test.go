package whatsapp

import (
	"encoding/json"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/pacerhq/pacer/channels"
	"github.com/pacerhq/pacer/channels/whatsapp/whatsapptest"
	"github.com/pacerhq/pacer/internal/answertime"
)

// BenchmarkConnectionsAtAnswerTime: the shape of issue 31, 50 numbers
// sending 80 messages a second each, every send leaving at its slot, to a
// fake answering in 250-350 ms (about 1,200 sends in flight), for 3 s; over
// HTTP/2 (h2c to the fake) and over HTTP/1.1. It reports the connections
// opened per 1,000 messages and the most open at once (sampled every 10 ms).
func BenchmarkConnectionsAtAnswerTime(b *testing.B) {
	const numbers, rate, seconds = 50, 80, 3
	d, err := answertime.Uniform(250*time.Millisecond, 350*time.Millisecond)
	if err != nil {
		b.Fatal(err)
	}
	for _, h2c := range []bool{true, false} {
		b.Run(fmt.Sprintf("h2c=%v", h2c), func(b *testing.B) {
			for range b.N {
				fake := whatsapptest.NewServer(whatsapptest.Config{AnswerTime: d})
				pool := NewPool(0, h2c)
				c, err := New(Config{BaseURL: fake.URL(), Token: "t", Pool: pool})
				if err != nil {
					b.Fatal(err)
				}
				opened := Connections().Opened()
				stop := make(chan struct{})
				var most int64
				go func() {
					for {
						select {
						case <-stop:
							return
						case <-time.After(10 * time.Millisecond):
							most = max(most, Connections().Open())
						}
					}
				}()
				var wg sync.WaitGroup
				start := time.Now()
				for k := range numbers {
					wg.Go(func() {
						key := fmt.Sprintf("1065403522%05d", k)
						for i := range rate * seconds {
							time.Sleep(time.Until(start.Add(time.Duration(i) * time.Second / rate)))
							wg.Go(func() {
								m := channels.Message{Key: key, To: "15550001234", ID: fmt.Sprint(k, "-", i), Payload: json.RawMessage(`{"type":"text","text":{"body":"hi"}}`)}
								if _, err := c.Send(b.Context(), m); err != nil {
									b.Error(err)
								}
							})
						}
					})
				}
				wg.Wait()
				close(stop)
				n := Connections().Opened() - opened
				b.ReportMetric(float64(n)*1000/(numbers*rate*seconds), "conns/1000msgs")
				b.ReportMetric(float64(most), "max-open")
				pool.CloseIdleConnections()
				fake.Close()
			}
		})
	}
}
