package whatsapptest_test

import (
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"

	"github.com/pacerhq/pacer/channels/whatsapp/whatsapptest"
)

// statusWebhook is the body of a status webhook as the tests read it: the
// fields of Meta's status notification that the fake fills.
type statusWebhook struct {
	Entry []struct {
		Changes []struct {
			Value struct {
				Metadata struct {
					PhoneNumberID string `json:"phone_number_id"`
				} `json:"metadata"`
				Statuses []struct {
					ID, Status  string
					RecipientID string `json:"recipient_id"`
					Callback    string `json:"biz_opaque_callback_data"`
					Errors      []struct{ Code int }
				} `json:"statuses"`
			} `json:"value"`
		} `json:"changes"`
	} `json:"entry"`
}

// The fake's status webhooks are signed as Meta signs them, echo the
// envelope id, give every message of a recipient the same fate, come
// twice with Duplicate 1 and in reverse with Reorder 1, and are retried
// until answered 2xx.
func TestWebhooks(t *testing.T) {
	secret := []byte("s3cret")
	var mu sync.Mutex
	var got []status
	refused := 3 // the first answers are 503: the fake retries
	recv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		mac := hmac.New(sha256.New, secret)
		mac.Write(body)
		if r.Header.Get("X-Hub-Signature-256") != "sha256="+hex.EncodeToString(mac.Sum(nil)) {
			t.Errorf("webhook signed %q, want the HMAC-SHA256 of its body", r.Header.Get("X-Hub-Signature-256"))
		}
		mu.Lock()
		defer mu.Unlock()
		if refused > 0 {
			refused--
			w.WriteHeader(503)
			return
		}
		var p statusWebhook
		if err := json.Unmarshal(body, &p); err != nil {
			t.Errorf("webhook body: %v", err)
			return
		}
		v := p.Entry[0].Changes[0].Value
		s := v.Statuses[0]
		if v.Metadata.PhoneNumberID != "1065" {
			t.Errorf("phone_number_id %q, want 1065", v.Metadata.PhoneNumberID)
		}
		st := status{ID: s.ID, Status: s.Status, Callback: s.Callback, To: s.RecipientID}
		if len(s.Errors) > 0 {
			st.Code = s.Errors[0].Code
		}
		got = append(got, st)
	}))
	t.Cleanup(recv.Close)
	fake := whatsapptest.NewServer(whatsapptest.Config{})
	t.Cleanup(fake.Close)
	fake.SendWebhooks(whatsapptest.Webhooks{URL: recv.URL, AppSecret: secret, Undeliverable: 0.5,
		Duplicate: 1, Reorder: 1, Retry: time.Millisecond})
	const n = 40
	for i := range n {
		if err := fake.Send("1065", text(fmt.Sprintf("+1555%04d", i%20), fmt.Sprintf("env-%d", i))); err != nil {
			t.Fatal(err)
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	st, err := fake.WaitWebhooks(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if st.Retries != 3 || st.Dropped != 0 {
		t.Errorf("stats %+v: want the 3 refused posts retried, none dropped", st)
	}
	byMsg := map[string][]status{}
	fate := map[string]bool{} // recipient -> failed
	for _, s := range got {
		byMsg[s.ID] = append(byMsg[s.ID], s)
	}
	if len(byMsg) != n {
		t.Fatalf("webhooks for %d messages, want %d", len(byMsg), n)
	}
	for id, ss := range byMsg {
		failed := ss[0].Status == "failed"
		var want []string
		if failed {
			want = []string{"failed", "failed"}
		} else {
			want = []string{"delivered", "delivered", "sent", "sent"} // reversed, each twice
		}
		if fmt.Sprint(statusNames(ss)) != fmt.Sprint(want) {
			t.Errorf("%s: statuses %v, want %v", id, statusNames(ss), want)
		}
		if failed && ss[0].Code != 131026 {
			t.Errorf("%s failed with %d, want 131026", id, ss[0].Code)
		}
		if f, seen := fate[ss[0].To]; seen && f != failed {
			t.Errorf("recipient %s failed for one message and not another", ss[0].To)
		}
		fate[ss[0].To] = failed
		if ss[0].Callback == "" || ss[0].To[0] == '+' {
			t.Errorf("%s: biz_opaque_callback_data %q, recipient_id %q: want the envelope id and a wa_id without +", id, ss[0].Callback, ss[0].To)
		}
	}
	if st.Failed131026 == 0 || st.Sent == 0 || st.Failed131026+st.Sent != n {
		t.Errorf("stats %+v: want some of both fates over %d messages", st, n)
	}
}

type status struct {
	ID, Status, Callback, To string
	Code                     int
}

func statusNames(ss []status) []string {
	var out []string
	for _, s := range ss {
		out = append(out, s.Status)
	}
	return out
}

// A template past its portfolio's messaging limit was answered 200; its
// status webhook says failed with MessagingLimitCode, the others sent
// and delivered.
func TestWebhooksMessagingLimit(t *testing.T) {
	var mu sync.Mutex
	codes := map[string]int{} // envelope id -> failed code, 0 if delivered
	recv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var p statusWebhook
		if err := json.NewDecoder(r.Body).Decode(&p); err != nil {
			t.Errorf("webhook body: %v", err)
			return
		}
		s := p.Entry[0].Changes[0].Value.Statuses[0]
		mu.Lock()
		defer mu.Unlock()
		if s.Status == "failed" {
			codes[s.Callback] = s.Errors[0].Code
		} else if _, ok := codes[s.Callback]; !ok {
			codes[s.Callback] = 0
		}
	}))
	t.Cleanup(recv.Close)
	fake := whatsapptest.NewServer(whatsapptest.Config{MessagingLimit: 2})
	t.Cleanup(fake.Close)
	fake.SendWebhooks(whatsapptest.Webhooks{URL: recv.URL, AppSecret: []byte("s"), Retry: time.Millisecond})
	for i, to := range []string{"+1555001", "+1555002", "+1555003", "+1555001"} {
		if err := fake.Send("1065", template(to, fmt.Sprint(i))); err != nil {
			t.Fatalf("template %d: %v", i, err)
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	st, err := fake.WaitWebhooks(ctx)
	if err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	defer mu.Unlock()
	if want := map[string]int{"0": 0, "1": 0, "2": whatsapptest.MessagingLimitCode, "3": 0}; fmt.Sprint(codes) != fmt.Sprint(want) {
		t.Errorf("statuses by envelope id %v, want %v (the third recipient past the tier of 2)", codes, want)
	}
	if st.FailedLimit != 1 || st.Delivered != 3 {
		t.Errorf("stats %+v, want 1 failed past the limit and 3 delivered", st)
	}
}
