package keypace

import (
	"testing"

	"github.com/pacerhq/pacer/pacer/suppress"
)

// TestRecipientSubOfEverySpelling: an envelope's "+15551234567" and
// WhatsApp's recipient_id "15551234567" name one pair, the one a status
// webhook's recipient hash names (PairSub of suppress.Hash); an email's
// case does not split it; other recipients stay apart.
func TestRecipientSubOfEverySpelling(t *testing.T) {
	want := PairSub(suppress.Hash("15551234567"))
	for _, to := range []string{"+15551234567", "15551234567", " +15551234567 "} {
		if got := recipientSub(to); got != want {
			t.Errorf("recipientSub(%q) = %q; want %q, the webhook's", to, got, want)
		}
	}
	if recipientSub("Ann@Example.com") != recipientSub("ann@example.com") {
		t.Errorf("an address in two cases names two pairs")
	}
	if recipientSub("+15551234567") == recipientSub("+15551234568") || len(want) != len("to:")+24 {
		t.Errorf("recipientSub: %q; want distinct recipients apart, \"to:\" and 24 hex digits", want)
	}
}
