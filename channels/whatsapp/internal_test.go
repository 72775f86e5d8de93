package whatsapp

import (
	"encoding/json"
	"net/url"
	"reflect"
	"testing"
	"time"

	"github.com/pacerhq/pacer/channels"
	"github.com/pacerhq/pacer/channels/internal/channeltest"
)

func TestClassifyTable(t *testing.T) {
	want := map[channels.Class][]int{
		channels.Throttle:  {130429, 131056, 80007, 4, 131048, 613},
		channels.Transient: {131057, 2, 131000, 131016, 1},
		channels.Permanent: {131049, 131026, 131047, 131021, 131051, 131053, 100, 131008, 131009, 33, 130472,
			132000, 132001, 132005, 132007, 132012, 132015},
		channels.Halt: {0, 190, 3, 10, 131005, 368, 131031, 131042, 131045, 133010},
	}
	for code := 200; code <= 299; code++ {
		want[channels.Halt] = append(want[channels.Halt], code)
	}
	// classify answers 200-299 without entries in codes.
	channeltest.CheckClassTable(t, "classify", len(codes)+100, want, func(code int) (channels.Class, bool) {
		r, ok := classify(code)
		return r.class, ok
	})
	for _, code := range []int{-1, 5, 199, 300, 133016, 9999999} {
		if r, ok := classify(code); ok {
			t.Errorf("classify(%d) = %v, true; want unknown", code, r)
		}
	}
	scopes := map[int]channels.Scope{130429: channels.ScopeKey, 131056: channels.ScopePair,
		80007: channels.ScopeAccount, 4: channels.ScopeAccount, 131048: channels.ScopeKey, 613: channels.ScopeKey}
	for code, s := range scopes {
		if r, _ := classify(code); r.scope != s {
			t.Errorf("classify(%d).scope = %v, want %v", code, r.scope, s)
		}
	}
}

// TestMessagesURL: the URL of a key's /messages endpoint is base/version/
// key/messages as url.JoinPath makes it (with the key path-escaped), for
// plain phone-number IDs and for keys the fast way leaves to JoinPath.
func TestMessagesURL(t *testing.T) {
	for _, base := range []string{"https://graph.facebook.com", "http://127.0.0.1:8080/graph/", "https://h.example/a//b"} {
		c, err := New(Config{Token: "t", BaseURL: base})
		if err != nil {
			t.Fatal(err)
		}
		for _, key := range []string{"106540352242922", "A-b_9", "a b", "x/y", "..", ".", "ü", "a%2F", "?q"} {
			want := c.base.JoinPath(c.version, url.PathEscape(key), "messages").String()
			if got := c.messagesURL(key); got != want {
				t.Errorf("base %q key %q: %q, want %q", base, key, got, want)
			}
		}
	}
}

func TestRedactKeepsErrorCodes(t *testing.T) {
	c := &Client{token: "EAAtoken"}
	for _, r := range []struct{ in, to, want string }{
		{"(#1300) Something went wrong", "10", "(#1300) Something went wrong"},
		{"(#100) Invalid parameter for 1", "1", "(#100) Invalid parameter for [recipient]"},
		{"(#131026) 15551234567 EAAtoken", "+15551234567", "(#131026) [recipient] [token]"},
	} {
		if got := c.redact(r.in, r.to); got != r.want {
			t.Errorf("redact(%q, %q) = %q, want %q", r.in, r.to, got, r.want)
		}
	}
}

// TestRequestBodyWays: the body requestBody builds without a map decodes to
// the same fields as the one built through a map, payload by payload, and
// the payloads it does not take go the map's way (same body or error).
func TestRequestBodyWays(t *testing.T) {
	for _, c := range []struct {
		payload string
		direct  bool // built without the map
	}{
		{``, true},
		{` null `, true},
		{`{}`, true},
		{`{"type":"text","text":{"preview_url":false,"body":"hi \u00e9 <b>"},"to":"+1999","messaging_product":"sms","recipient_type":"group","x":[1,2.50]}`, true},
		{`{ "type" : "text" , "text" : { "body" : "a b" } }`, true},
		{`{"a":1,"b":2,"a":3}`, true},
		{`{"biz_opaque_callback_data":"theirs","t\u006f":"+1"}`, true},
		{`{"biz_opaque_callback_data":null}`, true},
		{`{"biz_opaque_callback_data":7}`, false},
		{`{"a":1} x`, false},
		{`{"a":"` + "\xff" + `"}`, false},
		{`[1]`, false},
		{`{"a":}`, false},
	} {
		m := channels.Message{ID: "env-1", Key: "106540352242922", To: "+16505551234", Payload: json.RawMessage(c.payload)}
		want, werr := requestBodyMap(m)
		_, direct := appendRequestBody(nil, m)
		if direct != c.direct {
			t.Errorf("%s: built without the map %v, want %v", c.payload, direct, c.direct)
		}
		got, gerr := requestBody(m)
		if (werr == nil) != (gerr == nil) || (werr != nil && werr.Error() != gerr.Error()) {
			t.Errorf("%s: error %v, the map's way %v", c.payload, gerr, werr)
			continue
		}
		if werr != nil {
			continue
		}
		var g, w map[string]any
		if err := json.Unmarshal(got, &g); err != nil {
			t.Errorf("%s: body %s: %v", c.payload, got, err)
			continue
		}
		json.Unmarshal(want, &w)
		if !reflect.DeepEqual(g, w) {
			t.Errorf("%s: body %s, the map's way %s", c.payload, got, want)
		}
	}
}

// TestThrottleOf: the throttles of a status webhook's errors[] have the
// scope and least cooldown the answer to a send gives them; other codes
// are not throttles.
func TestThrottleOf(t *testing.T) {
	for _, c := range []struct {
		code  int
		scope channels.Scope
		least time.Duration
	}{
		{130429, channels.ScopeKey, 0}, {131056, channels.ScopePair, 0}, {80007, channels.ScopeAccount, AccountCooldown},
		{4, channels.ScopeAccount, AccountCooldown}, {131048, channels.ScopeKey, SpamCooldown}, {613, channels.ScopeKey, 0},
	} {
		if scope, least, ok := ThrottleOf(c.code); !ok || scope != c.scope || least != c.least {
			t.Errorf("ThrottleOf(%d) = %v, %v, %v; want %v, %v, true", c.code, scope, least, ok, c.scope, c.least)
		}
	}
	for _, code := range []int{131026, 131049, 131057, 190, 250, 999999} {
		if _, _, ok := ThrottleOf(code); ok {
			t.Errorf("ThrottleOf(%d): a throttle; want none", code)
		}
	}
}
