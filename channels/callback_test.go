package channels

import (
	"strings"
	"testing"
	"unicode/utf8"
)

// TestCallbackRoundTrip checks that what CallbackData writes reads back as its id and
// campaign, ":" and the prefix inside them included, and that a value
// written before campaigns were carried (a bare id) reads as that id.
func TestCallbackRoundTrip(t *testing.T) {
	long := strings.Repeat("é", 500)
	for _, tc := range []struct {
		id, campaign, want string
	}{
		{"c1-000001", "", "c1-000001"},
		{"c1-000001", "c1", "pacer1:2:c1:c1-000001"},
		{"a:b", "x:y:z", "pacer1:5:x:y:z:a:b"},
		{"pacer1:3:abc:d", "", "pacer1:0::pacer1:3:abc:d"},
		{"id-1", long, "id-1"}, // over MaxCallbackLen: the campaign is left out
	} {
		got := CallbackData(tc.id, tc.campaign)
		if got != tc.want {
			t.Errorf("CallbackData(%q, %.10q) = %.40q, want %.40q", tc.id, tc.campaign, got, tc.want)
		}
		if n := utf8.RuneCountInString(got); n > MaxCallbackLen {
			t.Errorf("CallbackData(%q, %.10q) is %d characters, over %d", tc.id, tc.campaign, n, MaxCallbackLen)
		}
		id, c := ParseCallbackData(got)
		wantC := tc.campaign
		if tc.campaign == long {
			wantC = ""
		}
		if id != tc.id || c != wantC {
			t.Errorf("ParseCallbackData(%.40q) = %q, %.10q; want %q, %.10q", got, id, c, tc.id, wantC)
		}
	}
	for _, s := range []string{"plain-id", "pacer1:", "pacer1:x:c:id", "pacer1:9:short:id", "pacer1:02:c1:id", "pacer1:2:c1-id"} {
		if id, c := ParseCallbackData(s); id != s || c != "" {
			t.Errorf("ParseCallbackData(%q) = %q, %q; want the value as the id and no campaign", s, id, c)
		}
	}
}
