package channels_test

import (
	"context"
	"errors"
	"fmt"
	"net"
	"testing"
	"time"

	"github.com/pacerhq/pacer/channels"
)

func TestMaybeAccepted(t *testing.T) {
	dial := &net.OpError{Op: "dial", Net: "tcp", Err: errors.New("connection refused")}
	read := &net.OpError{Op: "read", Net: "tcp", Err: errors.New("connection reset")}
	for _, c := range []struct {
		name string
		err  error
		want bool
	}{
		{"accepted", nil, true},
		{"provider refused", &channels.Error{Status: 429, Class: channels.Throttle}, false},
		{"provider 5xx", &channels.Error{Status: 503, Class: channels.Transient}, false},
		{"2xx unreadable", &channels.Error{Status: 200, Class: channels.Transient}, true},
		{"refused before sending", &channels.Error{Class: channels.Permanent, Code: "invalid-payload"}, false},
		{"dial failed", &channels.Error{Class: channels.Transient, Err: fmt.Errorf("post: %w", dial)}, false},
		{"dns failed", &channels.Error{Class: channels.Transient, Err: &net.DNSError{Err: "no such host"}}, false},
		{"reset after write", &channels.Error{Class: channels.Transient, Err: read}, true},
		{"timeout", context.DeadlineExceeded, true},
		{"cancelled", context.Canceled, true},
	} {
		if got := channels.MaybeAccepted(c.err); got != c.want {
			t.Errorf("%s: MaybeAccepted = %v, want %v", c.name, got, c.want)
		}
	}
}

func TestClassOfAndRetryAfter(t *testing.T) {
	e := fmt.Errorf("wrapped: %w", &channels.Error{Class: channels.Throttle, RetryAfter: 3 * time.Second})
	if channels.ClassOf(e) != channels.Throttle || channels.RetryAfter(e) != 3*time.Second {
		t.Errorf("ClassOf/RetryAfter through wrapping: %v %v", channels.ClassOf(e), channels.RetryAfter(e))
	}
	if channels.ClassOf(errors.New("boom")) != channels.Transient || channels.ClassOf(nil) != channels.Success {
		t.Error("ClassOf of a plain error must be Transient, of nil Success")
	}
	if channels.Throttle.String() != "throttle" || channels.ScopePair.String() != "pair" {
		t.Error("String names")
	}
}
