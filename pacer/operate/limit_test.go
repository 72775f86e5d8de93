package operate_test

import (
	"testing"

	"github.com/pacerhq/pacer/pacer/control"
	"github.com/pacerhq/pacer/pacer/operate"
)

// TestParseLimit: a limit as an operator writes it, read or refused with
// a *FieldError naming the field and saying what is accepted.
func TestParseLimit(t *testing.T) {
	for _, c := range []struct {
		key, rate, burst string
		want             control.KeyLimit
		field, problem   string // the refusal; "" when read
	}{
		{"106", "12", "3", control.KeyLimit{Key: "106", PerSecond: 12, Burst: 3}, "", ""},
		{"106", "0.5", "", control.KeyLimit{Key: "106", PerSecond: 0.5}, "", ""},
		{" ", "12", "", control.KeyLimit{}, "key", "is required"},
		{"106", "", "", control.KeyLimit{}, "rate", "is required (the key's rate in msgs/s)"},
		{"106", "fast", "", control.KeyLimit{}, "rate", `"fast" must be a number of msgs/s > 0`},
		{"106", "-1", "", control.KeyLimit{}, "rate", `"-1" must be a number of msgs/s > 0`},
		{"106", "1e-9", "", control.KeyLimit{}, "rate", `"1e-9" is below one message a day (1.15741e-05 msgs/s); pause the key's campaign instead`},
		{"106", "1e12", "", control.KeyLimit{}, "rate", "1e+12 is above the highest a pacer accepts (1e+09 msgs/s)"},
		{"106", "5", "0", control.KeyLimit{}, "burst", `"0" must be a whole number of messages >= 1`},
		{"106", "5", "2.5", control.KeyLimit{}, "burst", `"2.5" must be a whole number of messages >= 1`},
		{"106", "20", "1000000000", control.KeyLimit{Key: "106", PerSecond: 20, Burst: 1_000_000_000}, "", ""},
		{"106", "20", "1000000001", control.KeyLimit{}, "burst", "1000000001 is above the highest a pacer accepts (1000000000 messages)"},
		{"106", "0.001", "10000000", control.KeyLimit{}, "burst", "10000000 takes longer than 100 years to refill at 0.001 msgs/s: at most 3153600 at that rate"},
	} {
		got, err := operate.ParseLimit(c.key, c.rate, c.burst)
		fe, isField := operate.IsFieldError(err)
		switch {
		case c.field == "" && (err != nil || got != c.want):
			t.Errorf("ParseLimit(%q, %q, %q) = %+v, %v; want %+v", c.key, c.rate, c.burst, got, err, c.want)
		case c.field != "" && (!isField || fe.Field != c.field || fe.Problem != c.problem):
			t.Errorf("ParseLimit(%q, %q, %q): %v; want field %s: %s", c.key, c.rate, c.burst, err, c.field, c.problem)
		}
	}
}
