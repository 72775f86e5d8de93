// Package answertime is the answer time of a fake provider: how long it
// takes to answer a request it has counted. A [Dist] is fixed, uniform
// between two bounds, or log-normal with a given median and 99th
// percentile (a tail, as real providers have: the WhatsApp Cloud API
// typically answers in 200-500 ms, now and then in seconds). Every fake
// provider takes one (Config.AnswerTime), and `pacer fake-provider` reads
// one from --answer-time ([Parse]).
package answertime

import (
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"strings"
	"time"
)

// z99 is the 99th percentile of the standard normal distribution: a
// log-normal's p99 is median * exp(z99 * sigma).
const z99 = 2.3263478740408408

// kind is the shape of a Dist.
type kind uint8

const (
	fixed kind = iota
	uniform
	logNormal
)

// Dist is a distribution of answer times. The zero value answers at once
// (fixed 0). A Dist is a value: safe to copy and for concurrent use.
type Dist struct {
	kind kind
	a, b time.Duration // fixed: a; uniform: [a, b]; log-normal: median a, p99 b
	mu   float64       // log-normal: ln(median in ns)
	sig  float64       // log-normal: sigma of ln(answer time)
}

// Fixed returns the distribution that is always d (0 when d < 0).
func Fixed(d time.Duration) Dist { return Dist{kind: fixed, a: max(d, 0)} }

// Uniform returns the uniform distribution on [lo, hi]. It returns an
// error if lo < 0 or hi < lo.
func Uniform(lo, hi time.Duration) (Dist, error) {
	if lo < 0 || hi < lo {
		return Dist{}, fmt.Errorf("answer time %s-%s: want 0 <= low <= high", lo, hi)
	}
	return Dist{kind: uniform, a: lo, b: hi}, nil
}

// LogNormal returns the log-normal distribution whose median is median and
// whose 99th percentile is p99: ln(answer time) is normal with mean
// ln(median) and sigma ln(p99/median) / 2.326. It returns an error if
// median <= 0 or p99 < median (p99 == median is a fixed answer time).
func LogNormal(median, p99 time.Duration) (Dist, error) {
	if median <= 0 || p99 < median {
		return Dist{}, fmt.Errorf("answer time lognormal:%s,p99=%s: want 0 < median <= p99", median, p99)
	}
	return Dist{kind: logNormal, a: median, b: p99,
		mu: math.Log(float64(median)), sig: math.Log(float64(p99)/float64(median)) / z99}, nil
}

// Draw returns one answer time drawn from d with math/rand/v2's global
// source (safe for concurrent use, no lock shared between goroutines).
func (d Dist) Draw() time.Duration { return d.draw(rand.Float64, rand.NormFloat64) }

// DrawFrom returns one answer time drawn from d with r: for tests that
// need a reproducible sequence. r is not safe for concurrent use.
func (d Dist) DrawFrom(r *rand.Rand) time.Duration { return d.draw(r.Float64, r.NormFloat64) }

func (d Dist) draw(unit, norm func() float64) time.Duration {
	switch d.kind {
	case uniform:
		return d.a + time.Duration(unit()*float64(d.b-d.a+1))
	case logNormal:
		return time.Duration(math.Exp(d.mu + d.sig*norm()))
	}
	return d.a
}

// IsZero reports whether d always answers at once.
func (d Dist) IsZero() bool { return d.kind == fixed && d.a == 0 }

// Median returns the median answer time of d.
func (d Dist) Median() time.Duration {
	if d.kind == uniform {
		return d.a + (d.b-d.a)/2
	}
	return d.a
}

// String returns d in the form [Parse] reads: "300ms", "250ms-350ms" or
// "lognormal:300ms,p99=2s".
func (d Dist) String() string {
	switch d.kind {
	case uniform:
		return d.a.String() + "-" + d.b.String()
	case logNormal:
		return "lognormal:" + d.a.String() + ",p99=" + d.b.String()
	}
	return d.a.String()
}

// Set parses s into d ([Parse]): a Dist is a flag.Value.
func (d *Dist) Set(s string) error {
	v, err := Parse(s)
	if err != nil {
		return err
	}
	*d = v
	return nil
}

// errSyntax is the form every answer time takes.
var errSyntax = errors.New(`want a duration ("300ms"), a range ("250ms-350ms") or "lognormal:MEDIAN,p99=P99" ("lognormal:300ms,p99=2s")`)

// Parse reads an answer time: a Go duration for a fixed one ("300ms", "0"
// answers at once), LOW-HIGH for a uniform one ("250ms-350ms"), or
// "lognormal:MEDIAN,p99=P99" for a log-normal one ("lognormal:300ms,p99=2s").
// Its errors quote s and say which form was expected.
func Parse(s string) (Dist, error) {
	bad := func(err error) (Dist, error) { return Dist{}, fmt.Errorf("%q: %w", s, err) }
	if rest, ok := strings.CutPrefix(s, "lognormal:"); ok {
		m, p, ok := strings.Cut(rest, ",p99=")
		if !ok {
			return bad(errSyntax)
		}
		return pair(m, p, LogNormal, "want 0 < median <= p99", bad)
	}
	if lo, hi, ok := strings.Cut(s, "-"); ok && lo != "" {
		return pair(lo, hi, Uniform, "want 0 <= low <= high", bad)
	}
	v, err := time.ParseDuration(s)
	if err != nil {
		return bad(errSyntax)
	}
	if v < 0 {
		return bad(errors.New("want a duration >= 0"))
	}
	return Fixed(v), nil
}

// pair parses the two durations a and b of a two-parameter form and makes
// its Dist with mk; a duration that does not parse is errSyntax, a Dist mk
// refuses is want. bad quotes the whole answer time in the error.
func pair(a, b string, mk func(a, b time.Duration) (Dist, error), want string, bad func(error) (Dist, error)) (Dist, error) {
	x, err1 := time.ParseDuration(a)
	y, err2 := time.ParseDuration(b)
	if err := errors.Join(err1, err2); err != nil {
		return bad(errSyntax)
	}
	d, err := mk(x, y)
	if err != nil {
		return bad(errors.New(want))
	}
	return d, nil
}
