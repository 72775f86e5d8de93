package channels_test

import (
	"testing"

	"github.com/pacerhq/pacer/channels"
)

// TestReplace: ReplaceNumber replaces a number only where it stands whole,
// ReplaceAddress an address in any case where it stands whole; elsewhere
// (and for an empty one) the text is left as it is.
func TestReplace(t *testing.T) {
	replace := map[string]func(s, old, repl string) string{
		"ReplaceNumber":  channels.ReplaceNumber,
		"ReplaceAddress": channels.ReplaceAddress,
	}
	for _, r := range []struct{ fn, in, old, want string }{
		{"ReplaceNumber", "to 10: (#1300) failed for 10", "10", "to [r]: (#1300) failed for [r]"},
		{"ReplaceNumber", "wa_id:15551234567,", "15551234567", "wa_id:[r],"},
		{"ReplaceNumber", "+15551234567 and 15551234567x", "+15551234567", "[r] and 15551234567x"},
		{"ReplaceNumber", "15551234567", "15551234567", "[r]"},
		{"ReplaceAddress", "to Ada@Example.COM twice ada@example.com.", "ada@example.com", "to [r] twice [r]."},
		{"ReplaceAddress", "<ada@example.com>, xada@example.com", "ada@example.com", "<[r]>, xada@example.com"},
		{"ReplaceAddress", "ada@example.com.au ada@example.co", "ada@example.co", "ada@example.com.au [r]"},
	} {
		if got := replace[r.fn](r.in, r.old, "[r]"); got != r.want {
			t.Errorf("%s(%q, %q) = %q, want %q", r.fn, r.in, r.old, got, r.want)
		}
	}
	for _, r := range []struct{ fn, in, old string }{
		{"ReplaceNumber", "(#1300) Something went wrong", "10"},
		{"ReplaceNumber", "permanent:100 (#100) Invalid parameter", "1"},
		{"ReplaceNumber", "1101", "1"},
		{"ReplaceNumber", "no match", ""},
		{"ReplaceAddress", "bob.ada@example.com ada@example.com-x", "ada@example.com"},
		{"ReplaceAddress", "a@b.c", ""},
	} {
		if got := replace[r.fn](r.in, r.old, "[r]"); got != r.in {
			t.Errorf("%s(%q, %q) = %q, want it unchanged", r.fn, r.in, r.old, got)
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
