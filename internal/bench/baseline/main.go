// Command baseline is bench tooling, not part of Pacer: the minimal
// Kafka-to-HTTP forwarder that `make bench-e2e` runs beside `pacer run` to
// put Pacer's cost in proportion. It is a franz-go consumer group that
// POSTs each record's envelope to the WhatsApp Cloud API (the fake of
// channels/whatsapp/whatsapptest) with one pooled HTTP client, at most
// -concurrency requests at once, and commits a polled batch's offsets
// after every record of the batch was sent (at-least-once, no pacing, no
// idempotency ledger, no retries).
//
//	baseline -brokers B -topic T -group G -url BASE -token TOK -concurrency N [-h2c]
//
// It exits 0 on SIGTERM or SIGINT once the batch in hand is committed.
package main

import (
	"bytes"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/signal"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
)

func main() {
	brokers := flag.String("brokers", "", "Kafka bootstrap brokers, comma-separated")
	topic := flag.String("topic", "", "topic to consume")
	group := flag.String("group", "", "consumer group")
	base := flag.String("url", "", "base URL of the WhatsApp Cloud API (fake)")
	token := flag.String("token", "", "bearer token")
	conc := flag.Int("concurrency", 32, "requests in flight at most")
	h2c := flag.Bool("h2c", false, "HTTP/2 without TLS (prior knowledge) to an http:// URL, as over TLS to the Cloud API")
	flag.Parse()
	if *brokers == "" || *topic == "" || *group == "" || *base == "" || *conc < 1 {
		fmt.Fprintln(os.Stderr, "usage: baseline -brokers B -topic T -group G -url BASE [-token TOK] [-concurrency N]")
		os.Exit(2)
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	if err := run(ctx, strings.Split(*brokers, ","), *topic, *group, *base, *token, *conc, *h2c); err != nil {
		fmt.Fprintln(os.Stderr, "baseline:", err)
		os.Exit(1)
	}
}

func run(ctx context.Context, brokers []string, topic, group, base, token string, conc int, h2c bool) error {
	cl, err := kgo.NewClient(kgo.SeedBrokers(brokers...), kgo.ConsumerGroup(group), kgo.ConsumeTopics(topic),
		kgo.DisableAutoCommit(), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	if err != nil {
		return err
	}
	defer cl.Close()
	tr := http.DefaultTransport.(*http.Transport).Clone()
	tr.MaxIdleConns, tr.MaxIdleConnsPerHost = 0, conc // a pool as large as the requests in flight
	if h2c {
		tr.Protocols = new(http.Protocols)
		tr.Protocols.SetUnencryptedHTTP2(true)
	}
	hc := &http.Client{Transport: tr, Timeout: 10 * time.Second}
	jobs := make(chan *kgo.Record)
	var batch sync.WaitGroup
	for range conc {
		go func() {
			for r := range jobs {
				post(hc, base, token, r)
				batch.Done()
			}
		}()
	}
	defer close(jobs)
	for ctx.Err() == nil {
		fs := cl.PollRecords(ctx, 4*conc)
		if ctx.Err() != nil {
			return nil
		}
		var rs []*kgo.Record
		fs.EachRecord(func(r *kgo.Record) { rs = append(rs, r) })
		batch.Add(len(rs))
		for _, r := range rs {
			jobs <- r
		}
		batch.Wait()
		if err := cl.CommitRecords(context.WithoutCancel(ctx), rs...); err != nil {
			fmt.Fprintln(os.Stderr, "baseline: commit:", err)
		}
	}
	return nil
}

// post sends r's envelope as a WhatsApp text message; failures are printed
// and dropped (the bench counts arrivals at the fake).
func post(hc *http.Client, base, token string, r *kgo.Record) {
	var env struct {
		ID, Key, To string
		Payload     json.RawMessage
	}
	if err := json.Unmarshal(r.Value, &env); err != nil {
		fmt.Fprintln(os.Stderr, "baseline: envelope:", err)
		return
	}
	body, _ := json.Marshal(map[string]any{"messaging_product": "whatsapp", "to": env.To, "type": "text",
		"text": map[string]string{"body": "bench"}, "biz_opaque_callback_data": env.ID})
	req, _ := http.NewRequest(http.MethodPost, base+"/v21.0/"+env.Key+"/messages", bytes.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Authorization", "Bearer "+token)
	resp, err := hc.Do(req)
	if err != nil {
		fmt.Fprintln(os.Stderr, "baseline: post:", err)
		return
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
}
