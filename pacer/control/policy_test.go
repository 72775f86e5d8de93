package control_test

import (
	"context"
	"testing"

	"github.com/pacerhq/pacer/bucket"
	"github.com/pacerhq/pacer/bucket/adapt"
	"github.com/pacerhq/pacer/pacer/control"
)

type limitMap map[string]control.KeyLimit

func (m limitMap) Limit(_ context.Context, _, key string) (control.KeyLimit, bool, error) {
	l, ok := m[key]
	return l, ok, nil
}

// TestOverridePolicy: a key with a limit set gets it as its ceiling (burst 0
// = the channel's, the AIMD floor lowered to a lower rate); others the base.
func TestOverridePolicy(t *testing.T) {
	base := control.KeyPolicy{Limit: bucket.Limit{PerSecond: 80, Burst: 10}, AIMD: adapt.AIMD{Floor: 5}}
	o := control.OverridePolicy{Base: base, Channel: "whatsapp", Store: limitMap{
		"up": {Key: "up", PerSecond: 1000, Burst: 50}, "down": {Key: "down", PerSecond: 2}}}
	for key, want := range map[string]control.KeyPolicy{
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
