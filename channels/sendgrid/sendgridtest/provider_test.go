package sendgridtest_test

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/pacerhq/pacer/channels/sendgrid/sendgridtest"
)

// answer posts body with the given Authorization secret and Accept value
// ("" leaves it out) and returns the status and error messages.
func answer(t *testing.T, s *sendgridtest.Server, secret, accept, body string) (int, []string) {
	t.Helper()
	r := httptest.NewRequest("POST", "/v3/mail/send", strings.NewReader(body))
	r.Header.Set("Content-Type", "application/json")
	r.Header.Set("Authorization", "Bearer "+secret)
	if accept != "" {
		r.Header.Set("Accept", accept)
	}
	w := httptest.NewRecorder()
	s.ServeHTTP(w, r)
	var b sendgridtest.ErrorBody
	_ = json.Unmarshal(w.Body.Bytes(), &b)
	var msgs []string
	for _, e := range b.Errors {
		msgs = append(msgs, e.Message)
	}
	return w.Code, msgs
}

const good = `{"personalizations":[{"to":[{"email":"a@example.com"}]}],"from":{"email":"f@example.org"},"subject":"s","content":[{"type":"text/plain","value":"v"}]}`

// TestFakeAnswersLikeSendGrid: 406 without Accept, 403 temporary block
// after repeated bad requests (and only for that key, only for BlockFor),
// 451 for a regional key, each with SendGrid's message.
// Sources: https://www.twilio.com/docs/sendgrid/api-reference/how-to-use-the-sendgrid-v3-api/responses
// and https://www.twilio.com/docs/sendgrid/api-reference/how-to-use-the-sendgrid-v3-api/errors
func TestFakeAnswersLikeSendGrid(t *testing.T) {
	s := sendgridtest.New(sendgridtest.Config{
		APIKeys:    map[string]string{"a": "SG.a", "b": "SG.b", "eu": "SG.eu"},
		BlockAfter: 3, BlockFor: 50 * time.Millisecond, RegionalKeys: []string{"eu"},
	})
	if code, msgs := answer(t, s, "SG.a", "", good); code != http.StatusNotAcceptable || len(msgs) != 1 || msgs[0] != sendgridtest.MsgNoAccept {
		t.Errorf("no Accept: %d %v", code, msgs)
	}
	if code, msgs := answer(t, s, "SG.eu", "application/json", good); code != http.StatusUnavailableForLegalReasons || len(msgs) != 1 || msgs[0] != sendgridtest.MsgResidency {
		t.Errorf("regional key: %d %v", code, msgs)
	}
	// Two bad requests, a good one (the count starts over), three bad ones: blocked.
	for i, body := range []string{"{}", "{}", good, "{}", "{}", "{}"} {
		want := http.StatusBadRequest
		if body == good {
			want = http.StatusAccepted
		}
		if code, _ := answer(t, s, "SG.a", "application/json", body); code != want {
			t.Fatalf("request %d: %d, want %d", i, code, want)
		}
	}
	if code, msgs := answer(t, s, "SG.a", "application/json", good); code != http.StatusForbidden || len(msgs) != 1 || msgs[0] != sendgridtest.MsgBlocked {
		t.Errorf("after 3 bad requests in a row: %d %v; want 403 blocked", code, msgs)
	}
	if code, _ := answer(t, s, "SG.b", "application/json", good); code != http.StatusAccepted {
		t.Errorf("another key during a's block: %d", code)
	}
	time.Sleep(60 * time.Millisecond) // past BlockFor
	if code, _ := answer(t, s, "SG.a", "application/json", good); code != http.StatusAccepted {
		t.Errorf("after the block: %d", code)
	}
}
