package consumer

import (
	"math"
	"time"
)

// clockBase is the origin of every [instant]: when the package was
// initialized, with its monotonic clock reading.
var clockBase = time.Now()

// instant is a time kept in a key's state: the nanoseconds from clockBase
// to it, 8 bytes where a time.Time takes 24 (a key's state keeps four, and
// a process up to 100,000 states). 0 is the zero time.Time ("never").
//
// An instant is made from a time.Time ([instantOf], [nowInstant]) and
// compares as that time would: the difference from clockBase is read on the
// monotonic clock when the time has a monotonic reading (every time.Now()
// of the process does), so a step of the wall clock changes no comparison,
// as with time.Time. Inside a testing/synctest bubble, whose clock has no
// monotonic reading (and starts in 2000), the difference is of wall times:
// negative, and consistent among the bubble's times.
//
// Sub and After treat the zero instant as time.Time treats its zero value
// (the year 1, long before any time of the process), so a key never read
// is due for a read and a cooldown never set is over.
type instant int64

// instantOf returns t as an instant. A t that falls exactly on clockBase
// is taken 1 ns later (0 is the zero instant); one more than about 292
// years from clockBase saturates, as time.Time's Sub does.
func instantOf(t time.Time) instant {
	if t.IsZero() {
		return 0
	}
	d := t.Sub(clockBase)
	if d == 0 {
		d = 1
	}
	return instant(d)
}

// nowInstant returns time.Now() as an instant.
func nowInstant() instant { return instantOf(time.Now()) }

// IsZero reports whether i is the zero instant.
func (i instant) IsZero() bool { return i == 0 }

// Time returns i as a time.Time (the zero time.Time for the zero
// instant). Outside a synctest bubble it carries a monotonic reading.
func (i instant) Time() time.Time {
	if i == 0 {
		return time.Time{}
	}
	return clockBase.Add(time.Duration(i))
}

// Sub returns the duration i - u, as time.Time's Sub would for their
// times (saturating at the largest or smallest time.Duration).
func (i instant) Sub(u instant) time.Duration {
	if i == 0 || u == 0 {
		return i.Time().Sub(u.Time())
	}
	d := time.Duration(i - u)
	switch {
	case i >= 0 && u < 0 && d < 0:
		return math.MaxInt64
	case i < 0 && u > 0 && d > 0:
		return math.MinInt64
	}
	return d
}

// After reports whether i is after u.
func (i instant) After(u instant) bool {
	if i == 0 || u == 0 {
		return i.Time().After(u.Time())
	}
	return i > u
}
