package operate

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"strconv"
	"strings"

	"github.com/pacerhq/pacer/pacer/control"
)

// ParseLimit reads a pacing key's limit as an operator writes it: key,
// rate in msgs/s (at least [control.MinKeyRate], one a day; at most
// [control.MaxKeyRate]) and burst in messages ("" = the channel's). It
// returns a [*FieldError] naming key, rate or burst.
func ParseLimit(key, rate, burst string) (control.KeyLimit, error) {
	if strings.TrimSpace(key) == "" {
		return control.KeyLimit{}, &FieldError{"key", "is required"}
	}
	if rate == "" {
		return control.KeyLimit{}, &FieldError{"rate", "is required (the key's rate in msgs/s)"}
	}
	r, err := strconv.ParseFloat(rate, 64)
	if err != nil || !(r > 0) || math.IsInf(r, 0) {
		return control.KeyLimit{}, &FieldError{"rate", fmt.Sprintf("%q must be a number of msgs/s > 0", rate)}
	}
	if r < control.MinKeyRate {
		return control.KeyLimit{}, &FieldError{"rate", fmt.Sprintf("%q is below one message a day (%.6g msgs/s); pause the key's campaign instead", rate, control.MinKeyRate)}
	}
	kl := control.KeyLimit{Key: key, PerSecond: r}
	if burst != "" {
		b, err := strconv.Atoi(burst)
		if err != nil || b < 1 {
			return control.KeyLimit{}, &FieldError{"burst", fmt.Sprintf("%q must be a whole number of messages >= 1", burst)}
		}
		kl.Burst = b
	}
	if err := kl.Validate(); err != nil {
		msg := strings.TrimPrefix(err.Error(), control.ErrInvalid.Error()+": ")
		field := "rate"
		if strings.HasPrefix(msg, "burst") {
			field = "burst"
		}
		msg = strings.TrimPrefix(strings.TrimPrefix(msg, field+": "), field+" ")
		return control.KeyLimit{}, &FieldError{field, msg}
	}
	return kl, nil
}

// SetLimit gives kl.Key on channel its own limit (running pacers apply it
// within about a second) and returns the one before (had false: the
// channel's applied). It is logged as "key limit set" with the old and the
// new rate and burst, and by. A limit [control.KeyLimit.Validate] refuses
// is a [*FieldError]; other errors are Redis's.
func SetLimit(ctx context.Context, st *control.Store, log *slog.Logger, by, channel string, kl control.KeyLimit) (old control.KeyLimit, had bool, err error) {
	if err := kl.Validate(); err != nil {
		if _, ferr := ParseLimit(kl.Key, strconv.FormatFloat(kl.PerSecond, 'g', -1, 64), burstText(kl.Burst)); ferr != nil {
			return old, false, ferr
		}
		return old, false, err
	}
	old, had, err = st.SetLimit(ctx, channel, kl)
	if err != nil {
		return old, had, err
	}
	logChange(withBy(log, by).With("channel", channel, "key", kl.Key), "key limit set", old, had, &kl)
	return old, had, nil
}

// UnsetLimit removes key's own limit on channel (the channel's applies
// again) and returns the one removed (had false: none was set, and
// nothing changed). It is logged as "key limit unset" with the old value
// and by. An empty key is a [*FieldError]; other errors are Redis's.
func UnsetLimit(ctx context.Context, st *control.Store, log *slog.Logger, by, channel, key string) (old control.KeyLimit, had bool, err error) {
	if strings.TrimSpace(key) == "" {
		return old, false, &FieldError{"key", "is required"}
	}
	old, had, err = st.UnsetLimit(ctx, channel, key)
	if err != nil {
		return old, had, err
	}
	logChange(withBy(log, by).With("channel", channel, "key", key), "key limit unset", old, had, nil)
	return old, had, nil
}

func burstText(b int) string {
	if b == 0 {
		return ""
	}
	return strconv.Itoa(b)
}

// logChange logs a limit change with the old and new values.
func logChange(log *slog.Logger, msg string, old control.KeyLimit, had bool, nw *control.KeyLimit) {
	attrs := []any{}
	if had && old.Burst == 0 {
		attrs = append(attrs, "old_rate", old.PerSecond, "old_burst", "channel's")
	} else if had {
		attrs = append(attrs, "old_rate", old.PerSecond, "old_burst", old.Burst)
	} else {
		attrs = append(attrs, "old", "channel's")
	}
	if nw != nil && nw.Burst == 0 {
		attrs = append(attrs, "rate", nw.PerSecond, "burst", "channel's")
	} else if nw != nil {
		attrs = append(attrs, "rate", nw.PerSecond, "burst", nw.Burst)
	} else {
		attrs = append(attrs, "new", "channel's")
	}
	log.Info(msg, attrs...)
}

// IsFieldError reports whether err is a [*FieldError], and returns it.
func IsFieldError(err error) (*FieldError, bool) {
	var fe *FieldError
	ok := errors.As(err, &fe)
	return fe, ok
}
