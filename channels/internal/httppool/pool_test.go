package httppool

import (
	"bufio"
	"context"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"
	"time"

	"github.com/valyala/fasthttp"
)

// TestPoolSkipsClosedConnection: a provider that closes each kept-alive
// connection after its answer (as one does after its idle timeout) gets
// every later request on a new connection, none lost on the closed one and
// none twice, over plain HTTP and over TLS.
func TestPoolSkipsClosedConnection(t *testing.T) {
	for _, secure := range []bool{false, true} {
		t.Run(map[bool]string{false: "http", true: "https"}[secure], func(t *testing.T) {
			var requests, conns atomic.Int32
			closed := make(chan struct{}, 10)
			ts := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				io.Copy(io.Discard, r.Body)
				requests.Add(1)
				c, buf, err := w.(http.Hijacker).Hijack()
				if err != nil {
					t.Error(err)
					return
				}
				buf.WriteString("HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok")
				buf.Flush()
				c.Close() // no "Connection: close": the client learns of it from the FIN alone
				closed <- struct{}{}
			}))
			ts.Config.ConnState = func(_ net.Conn, s http.ConnState) {
				if s == http.StateNew {
					conns.Add(1)
				}
			}
			var tc *tls.Config
			if secure {
				ts.StartTLS()
				tc = &tls.Config{RootCAs: x509.NewCertPool()}
				tc.RootCAs.AddCert(ts.Certificate())
			} else {
				ts.Start()
			}
			defer ts.Close()
			p := NewPool(4, tc, nil)
			for i := range 3 {
				var status int
				err := p.Do(context.Background(), 5*time.Second, func(r *fasthttp.Request) {
					r.SetRequestURI(ts.URL + "/send")
					r.Header.SetMethod(fasthttp.MethodPost)
					r.SetBodyString(`{"n":1}`)
				}, func(r *fasthttp.Response) { status = r.StatusCode() })
				if err != nil || status != 200 {
					t.Fatalf("send %d: status %d, err %v; want 200, nil", i, status, err)
				}
				select {
				case <-closed:
					// The server's close(2) has returned; its FIN reaches
					// this side's socket on loopback at once, unless the
					// kernel defers its network work on a busy machine.
					time.Sleep(200 * time.Millisecond)
				case <-time.After(10 * time.Second):
					t.Fatal("the server did not close the connection")
				}
			}
			if n, c := requests.Load(), conns.Load(); n != 3 || c != 3 {
				t.Errorf("server saw %d requests on %d connections; want 3 on 3", n, c)
			}
		})
	}
}

// TestPoolContext: a Pool's send ends with its context: already done (no
// request), cancelled while waiting, past its deadline.
func TestPoolContext(t *testing.T) {
	var requests atomic.Int32
	hang := make(chan struct{})
	defer close(hang)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				if _, err := http.ReadRequest(bufio.NewReader(c)); err == nil {
					requests.Add(1)
				}
				<-hang
			}()
		}
	}()
	p := NewPool(4, nil, nil)
	fill := func(r *fasthttp.Request) {
		r.SetRequestURI("http://" + ln.Addr().String() + "/send")
		r.Header.SetMethod(fasthttp.MethodPost)
	}
	read := func(*fasthttp.Response) { t.Error("a response was read") }

	done, cancel := context.WithCancel(context.Background())
	cancel()
	if err := p.Do(done, time.Minute, fill, read); err != context.Canceled {
		t.Errorf("done context: %v; want context.Canceled", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	time.AfterFunc(50*time.Millisecond, cancel)
	start := time.Now()
	if err := p.Do(ctx, time.Minute, fill, read); err != context.Canceled {
		t.Errorf("cancelled: %v; want context.Canceled", err)
	}
	if d := time.Since(start); d > 10*time.Second {
		t.Errorf("cancelled send returned after %v", d)
	}
	ctx, cancel = context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	if err := p.Do(ctx, time.Minute, fill, read); err != context.DeadlineExceeded {
		t.Errorf("deadline: %v; want context.DeadlineExceeded", err)
	}
	if err := p.Do(context.Background(), 50*time.Millisecond, fill, read); err != context.DeadlineExceeded {
		t.Errorf("timeout without a context deadline: %v; want context.DeadlineExceeded", err)
	}
	for end := time.Now().Add(10 * time.Second); requests.Load() < 3 && time.Now().Before(end); {
		time.Sleep(10 * time.Millisecond) // the server reads on its own goroutine
	}
	if n := requests.Load(); n != 3 {
		t.Errorf("server saw %d requests; want 3 (none for the done context)", n)
	}
}

// TestPoolCancelAfterSendClosesNothing: a send's context cancelled once it
// returned (the usual deferred cancel) ends no other send and no
// connection: sends in turn reuse one connection, and a slow send in
// flight meanwhile gets its answer.
func TestPoolCancelAfterSendClosesNothing(t *testing.T) {
	var conns atomic.Int32
	ts := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/slow" {
			time.Sleep(500 * time.Millisecond)
		}
		io.WriteString(w, "ok")
	}))
	ts.Config.ConnState = func(_ net.Conn, s http.ConnState) {
		if s == http.StateNew {
			conns.Add(1)
		}
	}
	ts.Start()
	defer ts.Close()
	p := NewPool(4, nil, nil)
	send := func(path string) error {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		status := 0
		err := p.Do(ctx, time.Minute, func(r *fasthttp.Request) {
			r.SetRequestURI(ts.URL + path)
			r.Header.SetMethod(fasthttp.MethodPost)
		}, func(r *fasthttp.Response) { status = r.StatusCode() })
		if err == nil && status != 200 {
			return fmt.Errorf("status %d", status)
		}
		return err
	}
	for i := range 20 {
		if err := send("/fast"); err != nil {
			t.Fatalf("send %d: %v", i, err)
		}
	}
	if n := conns.Load(); n != 1 {
		t.Errorf("20 sends in turn opened %d connections, want 1", n)
	}
	slow := make(chan error, 1)
	go func() { slow <- send("/slow") }()
	time.Sleep(100 * time.Millisecond) // the slow send is in flight
	for i := range 5 {
		if err := send("/fast"); err != nil {
			t.Fatalf("fast send %d beside the slow one: %v", i, err)
		}
	}
	if err := <-slow; err != nil {
		t.Errorf("the slow send, its context alive: %v; want its answer", err)
	}
}
