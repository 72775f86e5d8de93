package apns

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"strings"
)

// request is a Message.Payload split into APNs request headers and body.
type request struct {
	header http.Header // apns-* headers from the payload's "headers"
	body   []byte      // the payload without "headers"
}

// errTooLarge marks a body over the APNs limit.
var errTooLarge = errors.New("payload too large")

// apnsHeaders are the request headers a payload may set. [A-SR]
var apnsHeaders = map[string]bool{
	"apns-push-type": true, "apns-priority": true, "apns-expiration": true,
	"apns-collapse-id": true, "apns-topic": true, "apns-id": true,
}

// pushTypes are the apns-push-type values Apple documents. [A-SR]
var pushTypes = map[string]bool{
	"alert": true, "background": true, "voip": true, "complication": true, "fileprovider": true,
	"mdm": true, "liveactivity": true, "controls": true, "location": true, "pushtotalk": true, "widgets": true,
}

// topicSuffixes are the suffixes Apple appends to the bundle ID to make the
// apns-topic of a push type; the others use the bundle ID itself (mdm uses
// the topic of the MDM certificate). [A-SR] Apple's page gives none we
// could confirm for "controls", which is left as sent.
var topicSuffixes = map[string]string{
	"voip": ".voip", "complication": ".complication", "fileprovider": ".pushkit.fileprovider",
	"liveactivity": ".push-type.liveactivity", "location": ".location-query", "pushtotalk": ".voip-ptt",
	"widgets": ".push-type.widgets",
}

// topicFor returns topic with the suffix pushType needs, unless it has it.
func topicFor(topic, pushType string) string {
	if s := topicSuffixes[pushType]; s != "" && !strings.HasSuffix(topic, s) {
		return topic + s
	}
	return topic
}

// defaultPushType returns the apns-push-type of a payload that names none:
// "background" when its aps holds content-available 1 and nothing that
// shows or sounds (alert, sound, badge), as Apple defines a background
// notification, and "alert" otherwise. [A-SR]
func defaultPushType(aps json.RawMessage) string {
	var m map[string]json.RawMessage
	if json.Unmarshal(aps, &m) != nil {
		return "alert"
	}
	for _, k := range []string{"alert", "sound", "badge"} {
		if _, ok := m[k]; ok {
			return "alert"
		}
	}
	if ca, ok := m["content-available"]; ok && string(bytes.TrimSpace(ca)) == "1" {
		return "background"
	}
	return "alert"
}

// parseRequest splits payload (a JSON object, or empty or null for {}) into
// headers and body. Its errors are short, say which header or member is
// wrong and quote no value; one for a body over the limit wraps errTooLarge.
func parseRequest(payload []byte) (request, error) {
	r := request{header: http.Header{}}
	fields := map[string]json.RawMessage{}
	p := bytes.TrimSpace(payload)
	if len(p) > 0 && !bytes.Equal(p, []byte("null")) {
		if p[0] != '{' {
			return r, errors.New("payload is not a JSON object")
		}
		if err := json.Unmarshal(p, &fields); err != nil {
			return r, errors.New("payload is not a valid JSON object")
		}
	}
	if h, ok := fields["headers"]; ok {
		delete(fields, "headers")
		if err := parseHeaders(h, r.header); err != nil {
			return r, err
		}
	}
	if r.header.Get("apns-push-type") == "" {
		r.header.Set("apns-push-type", defaultPushType(fields["aps"]))
	}
	if r.header.Get("apns-push-type") == "background" {
		switch r.header.Get("apns-priority") {
		case "":
			r.header.Set("apns-priority", "5")
		case "10":
			return r, errors.New("apns-priority 10 is an error for apns-push-type background: Apple requires 5 (or 1)")
		}
	}
	body, err := json.Marshal(fields)
	if err != nil { // cannot happen: every value was valid JSON
		return r, fmt.Errorf("encode body: %w", err)
	}
	limit := MaxPayload
	if r.header.Get("apns-push-type") == "voip" {
		limit = MaxVoIPPayload
	}
	if len(body) > limit {
		return r, fmt.Errorf("body is %d bytes, over the %d-byte limit: %w", len(body), limit, errTooLarge)
	}
	r.body = body
	return r, nil
}

// parseHeaders checks the "headers" member and sets each header on h.
func parseHeaders(raw json.RawMessage, h http.Header) error {
	if t := bytes.TrimSpace(raw); len(t) == 0 || t[0] != '{' {
		return errors.New(`"headers" is not a JSON object`)
	}
	var m map[string]json.RawMessage
	if err := json.Unmarshal(raw, &m); err != nil {
		return errors.New(`"headers" is not a valid JSON object`)
	}
	for name, v := range m {
		lname := strings.ToLower(name)
		if _, dup := h[http.CanonicalHeaderKey(lname)]; dup {
			return fmt.Errorf("header %s is given twice", lname)
		}
		val, err := headerValue(lname, v)
		if err != nil {
			return err
		}
		h.Set(lname, val)
	}
	return nil
}

// headerValue returns the text of header name, or an error if APNs does not
// document name or would refuse the value.
func headerValue(name string, v json.RawMessage) (string, error) {
	if !apnsHeaders[name] {
		if !isHeaderName(name) {
			return "", errors.New(`"headers" has a member that is not a header name`)
		}
		return "", fmt.Errorf("header %s is not one APNs documents", name)
	}
	var s string
	if err := json.Unmarshal(v, &s); err != nil {
		// apns-priority and apns-expiration may be JSON numbers.
		var n json.Number
		d := json.NewDecoder(bytes.NewReader(v))
		d.UseNumber()
		if (name != "apns-priority" && name != "apns-expiration") || d.Decode(&n) != nil {
			return "", fmt.Errorf("header %s is not a JSON string", name)
		}
		s = n.String()
	}
	switch name {
	case "apns-push-type":
		if !pushTypes[s] {
			return "", errors.New("apns-push-type is not a documented push type")
		}
	case "apns-priority":
		if s != "10" && s != "5" && s != "1" {
			return "", errors.New("apns-priority must be 10, 5 or 1")
		}
	case "apns-expiration":
		if _, err := strconv.ParseUint(s, 10, 63); err != nil {
			return "", errors.New("apns-expiration must be epoch seconds, or 0")
		}
	case "apns-collapse-id":
		if s == "" || len(s) > MaxCollapseID || !isHeaderValue(s) {
			return "", fmt.Errorf("apns-collapse-id must be 1 to %d printable ASCII bytes", MaxCollapseID)
		}
	case "apns-topic":
		if s == "" || !isHeaderValue(s) {
			return "", errors.New("apns-topic must be non-empty printable ASCII")
		}
	case "apns-id":
		if !isUUID(s) {
			return "", errors.New("apns-id must be a lowercase UUID")
		}
	}
	return s, nil
}

// isHeaderName reports whether s is short and made of lowercase letters,
// digits and '-', so that quoting it in an error is harmless.
func isHeaderName(s string) bool {
	if s == "" || len(s) > 64 {
		return false
	}
	for _, c := range []byte(s) {
		if !('a' <= c && c <= 'z' || '0' <= c && c <= '9' || c == '-') {
			return false
		}
	}
	return true
}

// isHeaderValue reports whether s is printable ASCII (with spaces), which
// every HTTP/2 stack accepts in a header.
func isHeaderValue(s string) bool {
	for _, c := range []byte(s) {
		if c < 0x20 || c > 0x7e {
			return false
		}
	}
	return true
}

// isUUID reports whether s is a canonical lowercase UUID, 8-4-4-4-12 hex digits.
func isUUID(s string) bool {
	if len(s) != 36 {
		return false
	}
	for i, c := range []byte(s) {
		switch i {
		case 8, 13, 18, 23:
			if c != '-' {
				return false
			}
		default:
			if !('0' <= c && c <= '9' || 'a' <= c && c <= 'f') {
				return false
			}
		}
	}
	return true
}

// isDeviceToken reports whether s is a non-empty, even number of hex
// digits. Apple says device tokens vary in length, so no length is fixed;
// 1024 digits is far beyond any seen.
func isDeviceToken(s string) bool {
	if len(s)%2 != 0 || len(s) > 1024 {
		return false
	}
	return allBytes(s, func(c byte) bool { return '0' <= c && c <= '9' || 'a' <= c && c <= 'f' || 'A' <= c && c <= 'F' })
}

// isAlnum reports whether s is non-empty ASCII letters and digits.
func isAlnum(s string) bool {
	return allBytes(s, func(c byte) bool { return '0' <= c && c <= '9' || 'A' <= c && c <= 'Z' || 'a' <= c && c <= 'z' })
}

// allBytes reports whether s is non-empty and every byte of it is ok.
func allBytes(s string, ok func(c byte) bool) bool {
	if s == "" {
		return false
	}
	for _, c := range []byte(s) {
		if !ok(c) {
			return false
		}
	}
	return true
}

// apnsID returns the apns-id of a response, lowercased, if it is a UUID,
// else "": it is logged and written to the DLQ as the failure's trace.
func apnsID(s string) string {
	if s = strings.ToLower(s); isUUID(s) {
		return s
	}
	return ""
}
