package pacer

import (
	"context"
	"testing"
	"time"

	"github.com/pacerhq/pacer/bucket"
	"github.com/pacerhq/pacer/bucket/adapt"
	"github.com/pacerhq/pacer/pacer/control"
	"github.com/pacerhq/pacer/pacer/envelope"
)

type limitMap map[string]control.KeyLimit

func (m limitMap) Limit(_ context.Context, _, key string) (control.KeyLimit, bool, error) {
	l, ok := m[key]
	return l, ok, nil
}

// TestOverridePolicy: a key with a limit set gets it as its ceiling (burst 0
// = the channel's, the AIMD floor lowered to a lower rate); others the base.
func TestOverridePolicy(t *testing.T) {
	base := KeyPolicy{Limit: bucket.Limit{PerSecond: 80, Burst: 10}, AIMD: adapt.AIMD{Floor: 5}}
	o := OverridePolicy{Base: base, Channel: "whatsapp", Store: limitMap{
		"up": {Key: "up", PerSecond: 1000, Burst: 50}, "down": {Key: "down", PerSecond: 2}}}
	for key, want := range map[string]KeyPolicy{
		"other": base,
		"up":    {Limit: bucket.Limit{PerSecond: 1000, Burst: 50}, AIMD: adapt.AIMD{Floor: 5}},
		"down":  {Limit: bucket.Limit{PerSecond: 2, Burst: 10}, AIMD: adapt.AIMD{Floor: 2}},
	} {
		got, err := o.KeyPolicy(context.Background(), key)
		if err != nil || got != want {
			t.Errorf("%s: %+v, %v; want %+v", key, got, err, want)
		}
		if err := got.Validate(); err != nil {
			t.Errorf("%s: policy invalid: %v", key, err)
		}
	}
}

// TestEnvelopePriorityNotBefore: priority defaults to normal, accepts high
// and normal only; not_before must be RFC 3339; both are named when wrong.
func TestEnvelopePriorityNotBefore(t *testing.T) {
	const head = `{"id":"a","key":"k","to":"t"`
	for in, want := range map[string]string{
		head + `}`:                                     "normal",
		head + `,"priority":"high"}`:                   "high",
		head + `,"priority":"normal"}`:                 "normal",
		head + `,"priority":"urgent"}`:                 "envelope: priority: \"urgent\" is neither high nor normal",
		head + `,"priority":1}`:                        "envelope: priority: must be a string, got a number",
		head + `,"not_before":"tomorrow"}`:             "envelope: not_before: \"tomorrow\" is not an RFC 3339 time",
		head + `,"not_before":"2030-01-02T03:04:05Z"}`: "normal 2030-01-02T03:04:05Z",
		head + `,"priorty":"high"}`:                    "envelope: priorty: unknown field (an envelope has id, key, to, payload, campaign, tenant, expires_at, priority, not_before)",
	} {
		env, err := envelope.Parse([]byte(in))
		got := ""
		if err != nil {
			got = err.Error()
		} else {
			got = string(env.Priority)
			if !env.NotBefore.IsZero() {
				got += " " + env.NotBefore.Format(time.RFC3339)
			}
		}
		if got != want {
			t.Errorf("%s: %q, want %q", in, got, want)
		}
	}
}
