// Package channeltest holds the checks that the provider adapters' black-box
// tests (channels/apns, channels/fcm, channels/sendgrid and
// channels/whatsapp) share: servers that answer a fixed response, hang or
// are already closed ([Respond], [Responder], [Hang], [Hanging], [Closed]),
// a handler that counts the requests that should not have been sent
// ([Counter]),
// and assertions on what every adapter promises of its errors: that a
// cancelled or expired context ends a send at once ([CheckContext],
// [CheckCanceled]), that a failed connection is a Transient error
// ([CheckTransportError]), that secrets stay out of error text
// ([NoSecrets], [PEMLines]) and that a provider's long message is cut to
// 200 bytes of valid UTF-8 ([LongMessage], [CheckTruncated]). [Capture]
// records what an adapter sent and [CheckFields] compares a JSON body's
// fields with the expected ones.
//
// For the fake providers (channels/*/*test) it holds [CheckFake], the
// checks every fake passes (strict buckets, latency, duplicates, /_stats,
// /_admin/rate), and the helpers their tests share: [Request], [Bearer] and
// [Serve] build and serve a request, [Clock] is a settable clock.
//
// It is imported only by _test.go files. Each adapter still checks its own
// error fields (Channel, Code, Scope…) through its own sendErr: the helpers
// here take a send function so that those checks run too.
package channeltest

import (
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/pacerhq/pacer/channels"
)

// Prompt is how long a send may take to return once its context is done.
// It is generous, for loaded CI machines: a send that ignores its context
// hangs for as long as the test runs.
const Prompt = 5 * time.Second

// Responder returns a handler that drains the request body and answers
// every request with status, body and the given headers, which come in
// name, value pairs.
func Responder(status int, body string, header ...string) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.Copy(io.Discard, r.Body)
		for i := 0; i+1 < len(header); i += 2 {
			w.Header().Set(header[i], header[i+1])
		}
		w.WriteHeader(status)
		io.WriteString(w, body)
	})
}

// Respond starts an HTTP/1.1 server of [Responder] (status, body and header
// pairs), closed when the test ends.
func Respond(t testing.TB, status int, body string, header ...string) *httptest.Server {
	t.Helper()
	ts := httptest.NewServer(Responder(status, body, header...))
	t.Cleanup(ts.Close)
	return ts
}

// Hang returns a handler that answers nothing: it returns only when the
// request's context is done (the client gave up) or when t ends, before
// t's cleanups run, so that closing the server does not wait for it.
func Hang(t testing.TB) http.Handler {
	done := t.Context().Done()
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		select {
		case <-done:
		case <-r.Context().Done():
		}
	})
}

// Hanging starts an HTTP/1.1 server of [Hang], closed when the test ends.
func Hanging(t testing.TB) *httptest.Server {
	t.Helper()
	ts := httptest.NewServer(Hang(t))
	t.Cleanup(ts.Close)
	return ts
}

// Counter is a handler that counts the requests it gets and answers each
// with an empty 200. Tests of requests an adapter must refuse before
// sending serve a Counter and call [Counter.CheckNone] at the end.
type Counter struct{ atomic.Int32 }

// ServeHTTP counts the request.
func (c *Counter) ServeHTTP(http.ResponseWriter, *http.Request) { c.Add(1) }

// CheckNone fails t if any request reached c.
func (c *Counter) CheckNone(t testing.TB) {
	t.Helper()
	if n := c.Load(); n != 0 {
		t.Errorf("%d requests reached the server, want 0", n)
	}
}

// Closed returns a server that is already closed: a request to its URL
// fails in the transport (connection refused).
func Closed() *httptest.Server {
	ts := httptest.NewServer(http.NotFoundHandler())
	ts.Close()
	return ts
}

// CheckContext checks that send, which must send one message to a server
// that never answers (see [Hang]), honours its context, in three subtests:
//   - "canceled": a context cancelled 20 ms into the send gives an error
//     that is context.Canceled (errors.Is);
//   - "deadline": a context with a 20 ms timeout gives an error that is
//     context.DeadlineExceeded (errors.Is);
//   - "already canceled": a context cancelled before the call gives
//     context.Canceled itself, not a wrapping of it.
//
// Each must return within [Prompt] of the context being done.
func CheckContext(t *testing.T, send func(ctx context.Context) error) {
	t.Helper()
	t.Run("canceled", func(t *testing.T) { CheckCanceled(t, send) })
	t.Run("deadline", func(t *testing.T) {
		ctx, cancel := context.WithTimeout(t.Context(), 20*time.Millisecond)
		defer cancel()
		start := time.Now()
		err := send(ctx)
		if !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("err = %v; want context.DeadlineExceeded", err)
		}
		checkPrompt(t, start.Add(20*time.Millisecond))
	})
	t.Run("already canceled", func(t *testing.T) {
		ctx, cancel := context.WithCancel(t.Context())
		cancel()
		start := time.Now()
		err := send(ctx)
		if err != context.Canceled {
			t.Fatalf("err = %v; want context.Canceled itself", err)
		}
		checkPrompt(t, start)
	})
}

// CheckCanceled checks that send, which must not finish on its own, returns
// an error that is context.Canceled (errors.Is) within [Prompt] of its
// context being cancelled 20 ms into the call.
func CheckCanceled(t *testing.T, send func(ctx context.Context) error) {
	t.Helper()
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	start := time.Now()
	time.AfterFunc(20*time.Millisecond, cancel)
	err := send(ctx)
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("err = %v; want context.Canceled", err)
	}
	checkPrompt(t, start.Add(20*time.Millisecond))
}

// checkPrompt fails t if more than Prompt has passed since done.
func checkPrompt(t *testing.T, done time.Time) {
	t.Helper()
	if d := time.Since(done); d > Prompt {
		t.Errorf("Send returned %v after its context was done; want under %v", d, Prompt)
	}
}

// CheckTransportError calls send with a [Closed] server, to which send must
// send one message, and checks that the error is a *channels.Error of class
// Transient (also to channels.ClassOf), with no HTTP status and the
// transport's error in Err. It returns that error.
func CheckTransportError(t *testing.T, send func(ts *httptest.Server) error) *channels.Error {
	t.Helper()
	err := send(Closed())
	var e *channels.Error
	if !errors.As(err, &e) {
		t.Fatalf("err = %v; want a *channels.Error", err)
	}
	if e.Class != channels.Transient || e.Status != 0 || e.Err == nil || channels.ClassOf(err) != channels.Transient {
		t.Errorf("got class=%v status=%d err=%v; want transient, 0, an Err", e.Class, e.Status, e.Err)
	}
	return e
}

// NoSecrets fails t if the text of err holds any of secrets, in any case.
// Empty secrets are skipped; a nil err holds nothing.
func NoSecrets(t testing.TB, err error, secrets ...string) {
	t.Helper()
	if err == nil {
		return
	}
	s := err.Error()
	l := strings.ToLower(s)
	for _, x := range secrets {
		if x != "" && strings.Contains(l, strings.ToLower(x)) {
			t.Errorf("error text %q holds the secret %q", s, x)
		}
	}
}

// PEMLines returns the lines of a PEM block that are key material: those
// of more than 8 bytes that are not a "-----" armour line. Pass them to
// [NoSecrets].
func PEMLines(pem string) []string {
	var lines []string
	for _, line := range strings.Split(pem, "\n") {
		line = strings.TrimSpace(line)
		if len(line) > 8 && !strings.HasPrefix(line, "-----") {
			lines = append(lines, line)
		}
	}
	return lines
}

// LongMessage is a provider message of 300 bytes, 150 two-byte runes: too
// long for a Detail, and cut at 200 bytes it would split a rune.
var LongMessage = strings.Repeat("é", 150)

// CheckTruncated fails t unless detail is [LongMessage] cut to 199 or 200
// bytes of valid UTF-8.
func CheckTruncated(t testing.TB, detail string) {
	t.Helper()
	if len(detail) > 200 || len(detail) < 199 || !utf8.ValidString(detail) || !strings.HasPrefix(LongMessage, detail) {
		t.Errorf("Detail is %d bytes, valid UTF-8 %v; want a prefix of the message of 199-200 valid bytes",
			len(detail), utf8.ValidString(detail))
	}
}

// ReadTestdata returns the content of testdata/name, relative to the test's
// package.
func ReadTestdata(t testing.TB, name string) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("testdata", name))
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// ReusePool is the connection bound per host (the adapters'
// MaxIdleConnsPerHost) [CheckReuse] builds its senders with: smaller than
// the default so that the sends beyond it stay cheap on a test machine.
const ReusePool = 512

// ReuseConcurrency is the sends in flight at which [CheckReuse] counts
// connections: 32, 256, and twice the pool ([ReusePool]), where the sends
// beyond the pool wait for one of its connections.
var ReuseConcurrency = []int{32, 256, 2 * ReusePool}

// CheckReuse checks that an adapter reuses its connections: for each of
// [ReuseConcurrency], it starts an HTTP/1.1 server of h that counts the TCP
// connections it accepts, builds a sender with newSend(server URL,
// [ReusePool]) (the adapter's own HTTP client, bounded to that many
// connections per host), warms it up (one round with every
// send held at the server until all are in, so that as many connections as
// sends in flight are open, then 2,000 sends), and then makes 4,000 sends at
// that concurrency. It fails if a send fails, or if those 4,000 sends
// opened more than 4 new connections (issue 9: at most 1 per 1,000
// messages).
func CheckReuse(t *testing.T, h http.Handler, newSend func(baseURL string, pool int) func(ctx context.Context) error) {
	t.Helper()
	for _, c := range ReuseConcurrency {
		var conns atomic.Int64
		// While warm-up holds sends, the first of them (as many as the pool
		// has connections) wait at the server until all have come.
		var gate atomic.Pointer[sync.WaitGroup]
		var toHold atomic.Int64
		ts := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if wg := gate.Load(); wg != nil && toHold.Add(-1) >= 0 {
				wg.Done()
				wg.Wait()
			}
			h.ServeHTTP(w, r)
		}))
		ts.Config.ConnState = func(_ net.Conn, s http.ConnState) {
			if s == http.StateNew {
				conns.Add(1)
			}
		}
		ts.Start()
		send := newSend(ts.URL, ReusePool)
		run := func(n int) {
			t.Helper()
			var failed atomic.Int64
			var first atomic.Value
			jobs := make(chan struct{})
			var wg sync.WaitGroup
			for range c {
				wg.Go(func() {
					for range jobs {
						if err := send(t.Context()); err != nil && failed.Add(1) == 1 {
							first.Store(err)
						}
					}
				})
			}
			for range n {
				jobs <- struct{}{}
			}
			close(jobs)
			wg.Wait()
			if f := failed.Load(); f > 0 {
				t.Fatalf("concurrency %d: %d of %d sends failed, first: %v", c, f, n, first.Load())
			}
		}
		var held sync.WaitGroup
		hold := min(c, ReusePool)
		held.Add(hold)
		toHold.Store(int64(hold))
		gate.Store(&held)
		run(c)
		gate.Store(nil)
		warm := conns.Load()
		run(2000)
		before := conns.Load()
		run(4000)
		if n := conns.Load() - before; n > 4 {
			t.Errorf("concurrency %d: 4000 sends after warm-up opened %d new connections, want <= 4 (1 per 1000); warm-up opened %d then %d",
				c, n, warm, before-warm)
		} else {
			t.Logf("concurrency %d: warm-up opened %d + %d connections, then 4000 sends %d", c, warm, before-warm, n)
		}
		ts.Close()
	}
}

// Clock is a settable clock for an adapter and a fake that take a Now
// func: it reads Start plus the offset last given to Set. Safe for
// concurrent use.
type Clock struct {
	Start time.Time
	mu    sync.Mutex
	d     time.Duration
}

// Now returns c.Start plus the offset last set.
func (c *Clock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.Start.Add(c.d)
}

// Set moves c to d after c.Start.
func (c *Clock) Set(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.d = d
}
