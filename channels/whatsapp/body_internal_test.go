package whatsapp

import (
	"encoding/json"
	"reflect"
	"testing"

	"github.com/pacerhq/pacer/channels"
)

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
