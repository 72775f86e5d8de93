package h2pool

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/pacerhq/pacer/channels"
)

// benchServerEnv makes the test binary a provider for the benchmark: it
// serves HTTP/1.1 and h2c on a free port, prints its address and answers
// every request after the duration the variable holds.
const benchServerEnv = "H2POOL_BENCH_ANSWER_TIME"

func TestMain(m *testing.M) {
	if v := os.Getenv(benchServerEnv); v != "" {
		serveBench(v)
		return
	}
	os.Exit(m.Run())
}

// serveBench is the benchmark's provider, in a process of its own so that
// the benchmark's CPU time is the client's alone.
func serveBench(answer string) {
	wait, err := time.ParseDuration(answer)
	if err != nil {
		panic(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		panic(err)
	}
	fmt.Println(ln.Addr())
	body := []byte(`{"messaging_product":"whatsapp","contacts":[{"input":"15550001234","wa_id":"15550001234"}],"messages":[{"id":"wamid.BENCH"}]}`)
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.Copy(io.Discard, r.Body)
		time.Sleep(wait)
		w.Header().Set("Content-Type", "application/json")
		w.Write(body)
	}), Protocols: new(http.Protocols), HTTP2: &http.HTTP2Config{MaxConcurrentStreams: 250}}
	srv.Protocols.SetHTTP1(true)
	srv.Protocols.SetUnencryptedHTTP2(true)
	srv.Serve(ln)
}

// startBenchServer starts the benchmark's provider process and returns its
// base URL.
func startBenchServer(b *testing.B, answer time.Duration) string {
	cmd := exec.Command(os.Args[0])
	cmd.Env = append(os.Environ(), benchServerEnv+"="+answer.String())
	out, err := cmd.StdoutPipe()
	if err != nil {
		b.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
	addr, err := bufio.NewReader(out).ReadString('\n')
	if err != nil {
		b.Fatal(err)
	}
	return "http://" + addr[:len(addr)-1]
}

// cpuTime returns the CPU time the process has used (user and system).
func cpuTime() time.Duration {
	var ru syscall.Rusage
	syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// BenchmarkSlowProvider: many sends in flight at
// once to a provider that answers each after 100 ms, WhatsApp's request:
// this pool speaking HTTP/2 (cleartext here; TLS in production, where each
// connection saved also saves a handshake); docs/decisions/0026 compares it
// with the HTTP/1.1 pool it replaced. It reports the client's CPU
// per request (the provider runs in another process) and the connections
// each opened.
func BenchmarkSlowProvider(b *testing.B) {
	const answer = 100 * time.Millisecond
	base := startBenchServer(b, answer)
	payload := []byte(`{"messaging_product":"whatsapp","recipient_type":"individual","to":"15550001234","type":"text","text":{"body":"hello"}}`)
	url := base + "/v23.0/106540352242922/messages"
	for _, inflight := range []int{64, 512, 2048} {
		b.Run(fmt.Sprintf("nethttp-h2/inflight=%d", inflight), func(b *testing.B) {
			var conns channels.ConnCounter
			// h2c to the http:// provider; the bound is never reached.
			p := New(Config{Name: "bench", MaxConns: 4096, HTTP2Only: true, Conns: &conns})
			defer p.CloseIdleConnections()
			hc := &http.Client{Transport: p}
			run(b, inflight, &conns, func(ctx context.Context) error {
				req, err := http.NewRequestWithContext(ctx, http.MethodPost, url, bytes.NewReader(payload))
				if err != nil {
					return err
				}
				req.Header = http.Header{"Authorization": {"Bearer bench-token"}, "Content-Type": {"application/json"}}
				resp, err := channels.Do(hc, req)
				if err != nil {
					return err
				}
				if _, err := channels.ReadBody(resp.Body, 1<<20); err != nil {
					return err
				}
				if resp.StatusCode != 200 {
					b.Errorf("HTTP %d", resp.StatusCode)
				}
				return nil
			})
		})
	}
}

// run makes b.N requests through send from inflight goroutines at once
// and reports the CPU time per request and the connections opened.
func run(b *testing.B, inflight int, conns *channels.ConnCounter, send func(context.Context) error) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	// Every send carries a deadline, as the pacer's do.
	sctx, scancel := context.WithTimeout(ctx, 5*time.Minute)
	defer scancel()
	b.ReportAllocs()
	cpu0 := cpuTime()
	b.ResetTimer()
	var next sync.WaitGroup
	work := make(chan struct{}, inflight)
	go func() {
		for range b.N {
			work <- struct{}{}
		}
		close(work)
	}()
	for range inflight {
		next.Go(func() {
			for range work {
				if err := send(sctx); err != nil {
					b.Error(err)
					return
				}
			}
		})
	}
	next.Wait()
	b.StopTimer()
	b.ReportMetric(float64(cpuTime()-cpu0)/float64(b.N), "cpu-ns/op")
	b.ReportMetric(float64(conns.Opened()), "conns")
}
