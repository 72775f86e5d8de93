package webhook

import (
	"crypto/ecdsa"
	"crypto/rand"
	"crypto/sha256"
	"crypto/x509"
	"encoding/base64"
	"encoding/json"
	"encoding/pem"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/pacerhq/pacer/pacer/suppress"
)

// ParseSendGridKey reads the Event Webhook's verification key as SendGrid
// shows it: base64 of a DER SubjectPublicKeyInfo, or the same in PEM. It
// must be an ECDSA P-256 key.
func ParseSendGridKey(s string) (*ecdsa.PublicKey, error) {
	s = strings.TrimSpace(s)
	var der []byte
	if b, _ := pem.Decode([]byte(s)); b != nil {
		der = b.Bytes
	} else {
		var err error
		if der, err = base64.StdEncoding.DecodeString(s); err != nil {
			return nil, errors.New("neither PEM nor base64 of a DER public key")
		}
	}
	k, err := x509.ParsePKIXPublicKey(der)
	if err != nil {
		return nil, fmt.Errorf("not a public key: %w", err)
	}
	ek, ok := k.(*ecdsa.PublicKey)
	if !ok || ek.Curve.Params().Name != "P-256" {
		return nil, errors.New("not an ECDSA P-256 public key")
	}
	return ek, nil
}

// sendgridSigned reports whether sig (X-Twilio-Email-Event-Webhook-
// Signature, base64 of an ASN.1 DER ECDSA signature) signs SHA-256 of
// timestamp + body with key.
func sendgridSigned(key *ecdsa.PublicKey, sig, timestamp string, body []byte) bool {
	der, err := base64.StdEncoding.DecodeString(sig)
	if err != nil {
		return false
	}
	h := sha256.New()
	h.Write([]byte(timestamp))
	h.Write(body)
	return ecdsa.VerifyASN1(key, h.Sum(nil), der)
}

// SendGridSignature returns the X-Twilio-Email-Event-Webhook-Signature
// SendGrid sends for body at timestamp, signed with key (for fakes and
// tests).
func SendGridSignature(key *ecdsa.PrivateKey, timestamp string, body []byte) (string, error) {
	h := sha256.Sum256(append([]byte(timestamp), body...))
	der, err := ecdsa.SignASN1(rand.Reader, key, h[:])
	if err != nil {
		return "", err
	}
	return base64.StdEncoding.EncodeToString(der), nil
}

var sgEvents = map[string]bool{"processed": true, "delivered": true, "deferred": true, "bounce": true, "dropped": true,
	"spamreport": true, "unsubscribe": true, "group_unsubscribe": true, "open": true, "click": true, "group_resubscribe": true}

// parseSendGrid returns the events of an Event Webhook body (a JSON
// array) for pacing key key, or an error naming the first field at
// fault. custom_args are flattened into each event by SendGrid, so the
// envelope id is the event's pacer_id and its campaign pacer_campaign.
func parseSendGrid(body []byte, key string) ([]Event, error) {
	var raw []map[string]json.RawMessage
	if err := json.Unmarshal(body, &raw); err != nil {
		return nil, fmt.Errorf("body: not a JSON array of SendGrid events: %w", err)
	}
	str := func(m map[string]json.RawMessage, f string) string {
		var s string
		json.Unmarshal(m[f], &s)
		return s
	}
	out := make([]Event, 0, len(raw))
	for i, m := range raw {
		kind, email := str(m, "event"), str(m, "email")
		if !sgEvents[kind] {
			// Events SendGrid adds later are skipped: refusing the batch
			// would lose the bounces beside them. (open counts as read,
			// click counts nothing.)
			continue
		}
		if email == "" {
			return nil, fmt.Errorf("[%d].email: missing", i)
		}
		var ts int64
		if err := json.Unmarshal(m["timestamp"], &ts); err != nil {
			return nil, fmt.Errorf("[%d].timestamp: not Unix seconds", i)
		}
		ev := Event{ID: str(m, "sg_event_id"), Channel: "sendgrid", Key: key, Kind: kind, Message: str(m, "pacer_id"), Campaign: str(m, "pacer_campaign"),
			ProviderID: str(m, "sg_message_id"), At: time.Unix(ts, 0).UTC(), Recipients: []string{suppress.Hash(email)}}
		if ev.ID == "" {
			ev.ID = ev.ProviderID + ":" + kind
		}
		if kind == "bounce" {
			ev.Reason = str(m, "type")
		}
		if kind == "bounce" || kind == "dropped" {
			ev.Code, _ = strconv.Atoi(strings.SplitN(str(m, "status"), ".", 2)[0])
		}
		out = append(out, ev)
	}
	return out, nil
}
