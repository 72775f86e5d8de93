package channels_test

import (
	"testing"

	"github.com/pacerhq/pacer/channels"
)

func TestReplaceNumber(t *testing.T) {
	for _, r := range []struct{ in, num, want string }{
		{"(#1300) Something went wrong", "10", "(#1300) Something went wrong"},
		{"permanent:100 (#100) Invalid parameter", "1", "permanent:100 (#100) Invalid parameter"},
		{"to 10: (#1300) failed for 10", "10", "to [r]: (#1300) failed for [r]"},
		{"wa_id:15551234567,", "15551234567", "wa_id:[r],"},
		{"+15551234567 and 15551234567x", "+15551234567", "[r] and 15551234567x"},
		{"15551234567", "15551234567", "[r]"},
		{"1101", "1", "1101"},
		{"no match", "", "no match"},
	} {
		if got := channels.ReplaceNumber(r.in, r.num, "[r]"); got != r.want {
			t.Errorf("ReplaceNumber(%q, %q) = %q, want %q", r.in, r.num, got, r.want)
		}
	}
}

func TestReplaceAddress(t *testing.T) {
	for _, r := range []struct{ in, addr, want string }{
		{"to Ada@Example.COM twice ada@example.com.", "ada@example.com", "to [r] twice [r]."},
		{"<ada@example.com>, xada@example.com", "ada@example.com", "<[r]>, xada@example.com"},
		{"ada@example.com.au ada@example.co", "ada@example.co", "ada@example.com.au [r]"},
		{"bob.ada@example.com ada@example.com-x", "ada@example.com", "bob.ada@example.com ada@example.com-x"},
		{"a@b.c", "", "a@b.c"},
	} {
		if got := channels.ReplaceAddress(r.in, r.addr, "[r]"); got != r.want {
			t.Errorf("ReplaceAddress(%q, %q) = %q, want %q", r.in, r.addr, got, r.want)
		}
	}
}

func TestCut(t *testing.T) {
	for _, c := range []struct {
		s    string
		n    int
		want string
	}{
		{"hello", 10, "hello"},
		{"hello", 5, "hello"},
		{"hello", 4, "hell"},
		{"héllo", 2, "h"}, // é is 2 bytes: a cut inside it ends before it
		{"héllo", 3, "hé"},
		{"ab\xff", 3, "ab\xff"}, // within n: left as is
		{"ab\xffcd", 4, "ab"},   // cut: invalid bytes at the end dropped
		{"", 0, ""},
	} {
		if got := channels.Cut(c.s, c.n); got != c.want {
			t.Errorf("Cut(%q, %d) = %q, want %q", c.s, c.n, got, c.want)
		}
	}
}
