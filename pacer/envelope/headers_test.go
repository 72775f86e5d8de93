package envelope_test

import (
	"slices"
	"testing"

	"github.com/pacerhq/pacer/pacer/envelope"
	"github.com/twmb/franz-go/pkg/kgo"
)

func TestForeignDropsPacersOwnHeaders(t *testing.T) {
	in := []kgo.RecordHeader{
		{Key: envelope.HeaderCampaign, Value: []byte("c1")},
		{Key: envelope.HeaderAttempt, Value: []byte("2")},
		{Key: "trace", Value: []byte("x")},
		{Key: "pacer-", Value: []byte("bare prefix")},
		{Key: "pace", Value: []byte("shorter than the prefix")},
		{Key: envelope.HeaderReason, Value: []byte("expired")},
	}
	orig := slices.Clone(in)
	got := envelope.Foreign(in)
	var keys []string
	for _, h := range got {
		keys = append(keys, h.Key)
	}
	if want := []string{"campaign", "trace", "pace"}; !slices.Equal(keys, want) {
		t.Fatalf("Foreign kept %q, want %q", keys, want)
	}
	// A copy written from the result must not change the record it came from.
	got = append(got, kgo.RecordHeader{Key: envelope.HeaderReplayed, Value: []byte("1")})
	got[0].Key = "changed"
	if !slices.EqualFunc(in, orig, func(a, b kgo.RecordHeader) bool { return a.Key == b.Key && string(a.Value) == string(b.Value) }) {
		t.Fatalf("Foreign's result shares the input: input now %v", in)
	}
}

func TestHeader(t *testing.T) {
	r := &kgo.Record{Headers: []kgo.RecordHeader{
		{Key: envelope.HeaderAttempt, Value: []byte("1")},
		{Key: envelope.HeaderAttempt, Value: []byte("2")},
		{Key: envelope.HeaderReplayed, Value: []byte("")},
	}}
	for _, c := range []struct{ key, want string }{
		{envelope.HeaderAttempt, "1"}, // the first of two
		{envelope.HeaderReplayed, ""},
		{envelope.HeaderReason, ""}, // absent
	} {
		if got := envelope.Header(r, c.key); got != c.want {
			t.Errorf("Header(%q) = %q, want %q", c.key, got, c.want)
		}
	}
}
