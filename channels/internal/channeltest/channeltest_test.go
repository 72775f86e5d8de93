package channeltest

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"
)

// recorder is a testing.TB that records failures instead of failing.
type recorder struct {
	testing.TB
	failed []string
}

func (r *recorder) Helper() {}

func (r *recorder) Errorf(format string, args ...any) {
	r.failed = append(r.failed, fmt.Sprintf(format, args...))
}

func TestNoSecrets(t *testing.T) {
	for _, c := range []struct {
		err     error
		secrets []string
		fails   int
	}{
		{nil, []string{"s3cret"}, 0},
		{errors.New("nothing here"), []string{"s3cret", ""}, 0},
		{errors.New("token S3CRET leaked"), []string{"s3cret"}, 1},
		{errors.New("a and b"), []string{"a and", "and b", "c"}, 2},
	} {
		r := &recorder{TB: t}
		NoSecrets(r, c.err, c.secrets...)
		if len(r.failed) != c.fails {
			t.Errorf("NoSecrets(%v, %q): failures %q, want %d", c.err, c.secrets, r.failed, c.fails)
		}
	}
}

func TestPEMLines(t *testing.T) {
	pem := "-----BEGIN PRIVATE KEY-----\nMIGHAgEAMBMGByqGSM49\r\nshort\n-----END PRIVATE KEY-----\n"
	if got := PEMLines(pem); len(got) != 1 || got[0] != "MIGHAgEAMBMGByqGSM49" {
		t.Errorf("PEMLines = %q", got)
	}
}

func TestCheckTruncated(t *testing.T) {
	for _, c := range []struct {
		detail string
		fails  bool
	}{
		{LongMessage[:200], false},
		{LongMessage[:199], true}, // cuts a rune
		{LongMessage[:198], true},
		{LongMessage, true},
		{strings.Repeat("e", 200), true},
	} {
		r := &recorder{TB: t}
		CheckTruncated(r, c.detail)
		if (len(r.failed) > 0) != c.fails {
			t.Errorf("CheckTruncated(%d bytes): failures %q, want failing %v", len(c.detail), r.failed, c.fails)
		}
	}
}

func TestCounter(t *testing.T) {
	var c Counter
	r := &recorder{TB: t}
	c.CheckNone(r)
	c.ServeHTTP(nil, nil)
	c.CheckNone(r)
	if len(r.failed) != 1 {
		t.Errorf("failures %q, want one after a request", r.failed)
	}
}

// TestHanging: a request to Hanging returns when its context is done, and
// the server closes at the end of the test.
func TestHanging(t *testing.T) {
	ts := Hanging(t)
	ctx, cancel := context.WithTimeout(t.Context(), 20*time.Millisecond)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, "GET", ts.URL, nil)
	start := time.Now()
	_, err := ts.Client().Do(req)
	if !errors.Is(err, context.DeadlineExceeded) || time.Since(start) > Prompt {
		t.Errorf("Do = %v after %v; want DeadlineExceeded at once", err, time.Since(start))
	}
}

func TestCheckContext(t *testing.T) {
	CheckContext(t, func(ctx context.Context) error {
		if ctx.Err() != nil {
			return ctx.Err()
		}
		<-ctx.Done()
		return fmt.Errorf("send: %w", ctx.Err())
	})
}

func TestClock(t *testing.T) {
	t0 := time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)
	c := &Clock{Start: t0}
	if !c.Now().Equal(t0) {
		t.Errorf("Now = %v, want the start %v", c.Now(), t0)
	}
	c.Set(time.Minute)
	c.Set(time.Hour) // from the start, not from the last offset
	if !c.Now().Equal(t0.Add(time.Hour)) {
		t.Errorf("Now = %v, want start + 1h", c.Now())
	}
}

func TestRequest(t *testing.T) {
	r := Request("POST", "/x?a=1", "body", "A", "1", "B", "", "Authorization", Bearer("tok"), "C", Bearer(""))
	b, _ := io.ReadAll(r.Body)
	if r.Method != "POST" || r.URL.RequestURI() != "/x?a=1" || string(b) != "body" || r.Header.Get("A") != "1" ||
		r.Header.Get("Authorization") != "Bearer tok" || len(r.Header) != 2 {
		t.Errorf("request %s %s %q, header %v", r.Method, r.URL, b, r.Header)
	}
	w := Serve(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(http.StatusTeapot) }), r)
	if w.Code != http.StatusTeapot {
		t.Errorf("Serve: HTTP %d, want 418", w.Code)
	}
}
