package fakeprovider

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"testing"
	"testing/synctest"
	"time"
)

// TestFake: Setup routes the fake's own patterns, GET /_stats, POST
// /_admin/rate and everything else; Add keeps arrivals in order; a fake
// not listening has no URL or Client, one listening serves its handler.
func TestFake(t *testing.T) {
	var f Fake[int]
	var rates []string
	Setup(&f, func() map[string]int { return map[string]int{"k": 1} },
		func(key string, rate float64) { rates = append(rates, fmt.Sprintf("%s=%v", key, rate)) },
		map[string]http.Handler{"POST /send": http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
			Add(&f, len(f.Arrivals())+1)
			w.WriteHeader(http.StatusAccepted)
		})},
		func(w http.ResponseWriter, _ *http.Request) { w.WriteHeader(http.StatusTeapot) })
	for _, c := range []struct {
		method, target string
		want           int
		body           string
	}{
		{"POST", "/send", 202, ""},
		{"POST", "/send", 202, ""},
		{"GET", "/send", 418, ""},
		{"GET", "/_stats", 200, `{"k":1}` + "\n"},
		{"POST", "/_admin/rate?key=k&rate=5", 204, ""},
		{"POST", "/_admin/rate?rate=0", 204, ""},
		{"POST", "/_admin/rate?rate=x", 400, "rate must be a number of requests per second (0 = unlimited)\n"},
		{"POST", "/_admin/rate?rate=NaN", 400, "rate must be a number of requests per second (0 = unlimited)\n"},
		{"GET", "/other", 418, ""},
	} {
		w := httptest.NewRecorder()
		f.Handler().ServeHTTP(w, httptest.NewRequest(c.method, c.target, nil))
		if w.Code != c.want || w.Body.String() != c.body {
			t.Errorf("%s %s: HTTP %d %q, want %d %q", c.method, c.target, w.Code, w.Body, c.want, c.body)
		}
	}
	if a := f.Arrivals(); len(a) != 2 || a[0] != 1 || a[1] != 2 {
		t.Errorf("arrivals = %v, want [1 2]", a)
	}
	if fmt.Sprint(rates) != "[k=5 =0]" {
		t.Errorf("rates set = %q", rates)
	}
	if f.URL() != "" || f.Client() != nil {
		t.Errorf("not listening: URL %q, Client %v", f.URL(), f.Client())
	}
	f.Close() // does nothing
	Listen(&f)
	defer f.Close()
	resp, err := f.Client().Post(f.URL()+"/send", "", nil)
	if err != nil || resp.StatusCode != 202 || len(f.Arrivals()) != 3 {
		t.Fatalf("POST /send over HTTP: %v, %v; %d arrivals", resp, err, len(f.Arrivals()))
	}
	resp.Body.Close()
}

// TestListenTLS: the client of a fake served over TLS speaks HTTP/2 and
// trusts its certificate.
func TestListenTLS(t *testing.T) {
	var f Fake[int]
	Setup(&f, func() int { return 0 }, func(string, float64) {}, nil, func(w http.ResponseWriter, r *http.Request) {
		w.Write([]byte(r.Proto))
	})
	ListenTLS(&f, &f)
	defer f.Close()
	resp, err := f.Client().Get(f.URL())
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.ProtoMajor != 2 || resp.TLS == nil {
		t.Errorf("answered over %s, TLS %v; want HTTP/2 over TLS", resp.Proto, resp.TLS != nil)
	}
}

func TestWriteJSON(t *testing.T) {
	w := httptest.NewRecorder()
	WriteJSON(w, 429, map[string]int{"a": 1})
	if w.Code != 429 || w.Header().Get("Content-Type") != "application/json" || w.Body.String() != `{"a":1}`+"\n" {
		t.Errorf("HTTP %d %q %q", w.Code, w.Header().Get("Content-Type"), w.Body)
	}
	w = httptest.NewRecorder()
	w.Header().Set("Content-Type", "application/json; charset=UTF-8")
	WriteJSON(w, 200, nil)
	if ct := w.Header().Get("Content-Type"); ct != "application/json; charset=UTF-8" {
		t.Errorf("Content-Type %q: the caller's was replaced", ct)
	}
}

func TestRandHex(t *testing.T) {
	a, b := RandHex(6), RandHex(6)
	if len(a) != 12 || a == b {
		t.Errorf("RandHex(6) = %q, %q; want 12 hex digits, new each time", a, b)
	}
}

func TestSleep(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		start := time.Now()
		if !Sleep(t.Context(), 0) || time.Since(start) != 0 {
			t.Error("Sleep(0) waited or failed")
		}
		if !Sleep(t.Context(), time.Second) || time.Since(start) != time.Second {
			t.Errorf("Sleep(1s) took %v", time.Since(start))
		}
		ctx, cancel := context.WithTimeout(t.Context(), 100*time.Millisecond)
		defer cancel()
		if Sleep(ctx, time.Second) || time.Since(start) != 1100*time.Millisecond {
			t.Errorf("cancelled Sleep reported true or took %v", time.Since(start))
		}
	})
}
