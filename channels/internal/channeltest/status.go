package channeltest

import (
	"context"
	"crypto/x509"
	"encoding/json"
	"encoding/pem"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/pacerhq/pacer/channels"
)

// CheckClassTable checks a provider's table of error codes against want,
// the codes of each class its documentation lists: lookup(code) must find
// each listed code with that class, and the table must hold size entries,
// as many as want lists (more is a code classed with no documentation
// checked here). table names the table in the failures ("codes").
func CheckClassTable[K comparable](t testing.TB, table string, size int, want map[channels.Class][]K, lookup func(K) (channels.Class, bool)) {
	t.Helper()
	n := 0
	for class, list := range want {
		for _, code := range list {
			if got, ok := lookup(code); !ok || got != class {
				t.Errorf("%s[%#v] = %v, %v; want %v", table, code, got, ok, class)
			}
			n++
		}
	}
	if n != size {
		t.Errorf("%s has %d entries, the test lists %d", table, size, n)
	}
}

// CheckNewErr checks err, what an adapter's New returned for a config: nil
// when field is "", else an error naming field; it fails t at once if not.
func CheckNewErr(t testing.TB, err error, field string) {
	t.Helper()
	switch {
	case field == "" && err != nil:
		t.Fatalf("New: %v", err)
	case field != "" && (err == nil || !strings.Contains(err.Error(), field)):
		t.Fatalf("New: %v; want an error naming %s", err, field)
	}
}

// Must returns v, failing t at once if err is not nil: an adapter test's
// newClient passes it what the adapter's New returned.
func Must[T any](t testing.TB, v T, err error) T {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
	return v
}

// PKCS8 returns key, a private key as crypto's GenerateKey functions return
// it, as PEM-encoded PKCS#8 ("PRIVATE KEY"), failing t at once if it cannot
// be marshalled.
func PKCS8(t testing.TB, key any) []byte {
	t.Helper()
	der, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	return pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: der})
}

// Message returns the message an adapter test sends: envelope id id, key,
// recipient to and payload, a JSON object.
func Message(id, key, to, payload string) channels.Message {
	return channels.Message{ID: id, Key: key, To: to, Payload: json.RawMessage(payload)}
}

// ErrorOf returns the *channels.Error in err, failing t if there is none,
// if its Channel is not channel or if its text holds one of secrets.
func ErrorOf(t testing.TB, channel string, err error, secrets ...string) *channels.Error {
	t.Helper()
	var e *channels.Error
	if !errors.As(err, &e) {
		t.Fatalf("err = %v; want a *channels.Error", err)
	}
	if e.Channel != channel {
		t.Errorf("Channel = %q, want %s", e.Channel, channel)
	}
	NoSecrets(t, err, secrets...)
	return e
}

// SendError sends m through send (a client's Send method) and returns the
// *channels.Error of the error it must return, checked as [ErrorOf] checks
// it; a send that succeeds fails t at once.
func SendError(t testing.TB, channel string, send func(context.Context, channels.Message) (channels.Result, error), m channels.Message, secrets ...string) *channels.Error {
	t.Helper()
	res, err := send(t.Context(), m)
	if err == nil {
		t.Fatalf("Send = %+v, nil; want an error", res)
	}
	return ErrorOf(t, channel, err, secrets...)
}

// SendOf returns a send of m through send (a client's Send method) that
// keeps only its error, as [CheckContext] and [CheckReuse] take it.
func SendOf(send func(context.Context, channels.Message) (channels.Result, error), m channels.Message) func(context.Context) error {
	return func(ctx context.Context) error {
		_, err := send(ctx, m)
		return err
	}
}

// Bound returns send (a client's Send method) bound to ctx, as
// [CountAnswers] and [SendCaptured] take it.
func Bound(ctx context.Context, send func(context.Context, channels.Message) (channels.Result, error)) func(channels.Message) (channels.Result, error) {
	return func(m channels.Message) (channels.Result, error) { return send(ctx, m) }
}

// Numbered returns the i-th of a run of messages m with envelope ids
// env-0, env-1...: m with ID "env-" and i.
func Numbered(m channels.Message) func(i int) channels.Message {
	return func(i int) channels.Message {
		m := m
		m.ID = "env-" + strconv.Itoa(i)
		return m
	}
}

// CheckLocalLimit sends m through send against a limit the adapter
// enforces before sending, count telling how many requests the server has
// had. Within the limit (ok) the send must succeed with exactly one
// request; over it, it must fail as Permanent with code, without a
// request. It fails t at once if not, and returns the send's error.
func CheckLocalLimit(t *testing.T, count func() int32, send func(channels.Message) (channels.Result, error), m channels.Message, ok bool, code string) error {
	t.Helper()
	before := count()
	_, err := send(m)
	sent := count() - before
	if ok {
		if err != nil || sent != 1 {
			t.Fatalf("Send = %v with %d requests; want success with 1", err, sent)
		}
		return nil
	}
	var e *channels.Error
	if !errors.As(err, &e) || e.Class != channels.Permanent || e.Code != code || sent != 0 {
		t.Fatalf("Send = %v with %d requests; want Permanent %q and no request", err, sent, code)
	}
	return err
}

// Statuses maps a class to the HTTP statuses whose answers must have it.
type Statuses map[channels.Class][]int

// Answer is what a provider answers: an HTTP status and a body.
type Answer struct {
	Status int
	Body   string
}

// Answers maps a class to the answers that must have it, each written as
// the status, a space and the body ("502 <html>...</html>", "503" for an
// empty body).
type Answers map[channels.Class][]string

// parseAnswer reads an answer of [Answers].
func parseAnswer(t *testing.T, s string) Answer {
	t.Helper()
	code, body, _ := strings.Cut(s, " ")
	status, err := strconv.Atoi(code)
	if err != nil {
		t.Fatalf("answer %q: no status before the body", s)
	}
	return Answer{status, body}
}

// Documented maps a class to a provider's documented errors that an adapter
// must classify so, each written "name status" or "name status code": the
// body of testdata/name.json answered with HTTP status gives an error with
// Code code (name when not written).
type Documented map[channels.Class][]string

// DocumentedError is one error of [Documented], its body read.
type DocumentedError struct {
	Name   string // of the testdata file, without .json
	Status int
	Code   string
	Class  channels.Class
	Body   string
}

// CheckDocumented runs a subtest per documented error of want, named
// name/status: send must send one message to a server answering d.Body
// with d.Status, check the adapter's own fields of the error (Scope,
// Detail, RetryAfter...) and return it; CheckDocumented then checks its
// Code, Status and Class.
func CheckDocumented(t *testing.T, want Documented, send func(t *testing.T, d DocumentedError) *channels.Error) {
	t.Helper()
	for _, class := range sortedKeys(want) {
		for _, s := range want[class] {
			f := strings.Fields(s)
			if len(f) < 2 || len(f) > 3 {
				t.Fatalf("documented error %q: want name, status and maybe code", s)
			}
			d := DocumentedError{Name: f[0], Code: f[0], Class: class}
			var err error
			if d.Status, err = strconv.Atoi(f[1]); err != nil {
				t.Fatalf("documented error %q: %v", s, err)
			}
			if len(f) == 3 {
				d.Code = f[2]
			}
			t.Run(d.Name+"/"+f[1], func(t *testing.T) {
				d.Body = ReadTestdata(t, d.Name+".json")
				e := send(t, d)
				if e.Code != d.Code || e.Status != d.Status || e.Class != d.Class {
					t.Errorf("got code=%q status=%d class=%v; want %q %d %v", e.Code, e.Status, e.Class, d.Code, d.Status, d.Class)
				}
			})
		}
	}
}

// SendFunc sends one message through the adapter under test to a server
// that answers status and body, and returns the send's *channels.Error.
type SendFunc func(t *testing.T, status int, body string) *channels.Error

// CheckUnknownCode checks that an error body whose code is in none of the
// adapter's tables is classified by HTTP status: for each status of want, a
// subtest named by the status sends body and checks that the error has the
// class and code as its Code. check, if not nil, then checks the adapter's
// own fields of e (Scope, RetryAfter...).
func CheckUnknownCode(t *testing.T, body, code string, want Statuses, send SendFunc, check func(t *testing.T, status int, e *channels.Error)) {
	t.Helper()
	for _, class := range sortedKeys(want) {
		for _, status := range want[class] {
			t.Run(strconv.Itoa(status), func(t *testing.T) {
				e := send(t, status, body)
				if e.Class != class || e.Code != code {
					t.Errorf("got class=%v code=%q; want %v %s", e.Class, e.Code, class, code)
				}
				if check != nil {
					check(t, status, e)
				}
			})
		}
	}
}

// CheckNonProviderBody checks that an answer whose body is not the
// provider's error body is classified by its status alone: for each answer
// of want, the error has the class, the answer's Status, no Code and an Err
// saying what could not be read. check, if not nil, then checks the
// adapter's own fields of e.
func CheckNonProviderBody(t *testing.T, want Answers, send SendFunc, check func(t *testing.T, a Answer, e *channels.Error)) {
	t.Helper()
	for _, class := range sortedKeys(want) {
		for _, s := range want[class] {
			a := parseAnswer(t, s)
			t.Run(fmt.Sprintf("%d %.24q", a.Status, a.Body), func(t *testing.T) {
				e := send(t, a.Status, a.Body)
				if e.Class != class || e.Status != a.Status || e.Code != "" || e.Err == nil {
					t.Errorf("got class=%v status=%d code=%q err=%v; want %v %d, no code, an Err",
						e.Class, e.Status, e.Code, e.Err, class, a.Status)
				}
				if check != nil {
					check(t, a, e)
				}
			})
		}
	}
}

// sortedKeys returns the classes of m in order, so that subtests run in the
// same order every time.
func sortedKeys[V any](m map[channels.Class]V) []channels.Class {
	keys := make([]channels.Class, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}
