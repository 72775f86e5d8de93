package sendgrid

import (
	"strings"
	"testing"

	"github.com/pacerhq/pacer/channels"
)

// TestClassifyTable checks [statuses] against providers.md §4.3, row by row.
func TestClassifyTable(t *testing.T) {
	want := map[int]channels.Class{
		429: channels.Throttle,
		500: channels.Transient, 502: channels.Transient, 503: channels.Transient, 504: channels.Transient,
		400: channels.Permanent, 406: channels.Permanent, 413: channels.Permanent,
		401: channels.Halt,
		403: channels.Halt,
		451: channels.Halt, // data residency [S-ERR]
	}
	if len(statuses) != len(want) {
		t.Errorf("statuses has %d entries, §4.3 lists %d", len(statuses), len(want))
	}
	for status, class := range want {
		if got := classify(status, []string{"anything"}); got != class {
			t.Errorf("classify(%d) = %v, want %v", status, got, class)
		}
	}
	for _, c := range []struct {
		messages []string
		class    channels.Class
	}{
		{nil, channels.Halt},
		{[]string{"The from address does not match a verified Sender Identity."}, channels.Halt},
		{[]string{"access forbidden"}, channels.Halt},
		{[]string{"You are temporarily blocked from sending emails due to repeated bad requests."}, channels.Throttle},
		{[]string{"x", "YOU ARE TEMPORARILY BLOCKED"}, channels.Throttle},
		{[]string{"Too many bad requests. Temporary block"}, channels.Throttle},
	} {
		if got := classify(403, c.messages); got != c.class {
			t.Errorf("classify(403, %q) = %v, want %v", c.messages, got, c.class)
		}
	}
	// The block wording only matters on a 403.
	if got := classify(400, []string{"temporarily blocked"}); got != channels.Permanent {
		t.Errorf("classify(400, blocked) = %v, want permanent", got)
	}
	for status, class := range map[int]channels.Class{
		404: channels.Permanent, 499: channels.Permanent, 501: channels.Transient, 599: channels.Transient,
		302: channels.Transient, 100: channels.Transient,
	} {
		if got := classify(status, nil); got != class {
			t.Errorf("classify(%d) = %v, want %v", status, got, class)
		}
	}
}

func TestRedact(t *testing.T) {
	c := &Client{secrets: []string{"SG.long.secret-with-SG.short", "SG.short"}}
	for _, r := range []struct {
		in, to, want string
	}{
		{"key SG.long.secret-with-SG.short and SG.short", "", "key [api-key] and [api-key]"},
		{"to Ada@Example.COM twice ada@example.com", "ada@example.com", "to [recipient] twice [recipient]"},
		{"others <bcc@example.net>, [cc@example.org]", "ada@example.com", "others <[address]>, [[address]]"},
		{"no address here: a@ b", "", "no address here: a@ b"},
		{"field personalizations.0.to.0.email", "x@y.z", "field personalizations.0.to.0.email"},
		{"unicode İ ada@example.com", "ada@example.com", "unicode İ [recipient]"},
		{"code 400 for 4", "4", "code 400 for [recipient]"},
		{"bob.ada@example.com", "ada@example.com", "[address]"},
	} {
		if got := c.redact(r.in, r.to); got != r.want {
			t.Errorf("redact(%q, %q) = %q, want %q", r.in, r.to, got, r.want)
		}
	}
	if got := c.redact(strings.Repeat("ab", 150), ""); len(got) != maxDetail {
		t.Errorf("redact cut to %d bytes, want %d", len(got), maxDetail)
	}
}
