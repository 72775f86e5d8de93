package consumer

import (
	"context"
	"time"

	"github.com/pacerhq/pacer/internal/tick"
	"github.com/pacerhq/pacer/pacer/control"
	"github.com/pacerhq/pacer/pacer/keypace"
)

// The per-key pacing types, defined in package keypace (see there).
type (
	// Adapter is the shared adaptive state of pacing keys (AIMD rate,
	// breaker); *adapt.Adapter implements it.
	Adapter = keypace.Adapter
	// KeyActivity is one active pacing key as this process sees it.
	KeyActivity = keypace.Activity
)

// idleReleases are how long after it last finished a record an idle
// process returns its free memory to the operating system (see
// releaseLoop): at 30 s, and again once the provider connections of its
// last sends have closed (channels.IdleConnTimeout, 90 s idle) with their
// buffers and goroutines.
var idleReleases = []time.Duration{30 * time.Second, 2 * time.Minute}

// releaseTick is how often releaseLoop looks at the records finished.
const releaseTick = 10 * time.Second

// releaseLoop gives a process's free heap back to the operating system
// once it has been idle for each of idleReleases after finishing records:
// a campaign leaves the garbage of its sends (a heap up to twice what is
// live, by the runtime's GOGC), which the runtime would otherwise collect
// and return over several minutes; an idle replica then holds what is
// live (its keys' state, kept activeFor) and little more. A full GC per
// release, never while records are being finished.
func (p *Pacer) releaseLoop(ctx context.Context, release func()) {
	last, since, done := p.tally.snapshot(), time.Now(), len(idleReleases)
	tick.Every(ctx, releaseTick, func(now time.Time) {
		if s := p.tally.snapshot(); s != last {
			last, since, done = s, now, 0
		} else if done < len(idleReleases) && now.Sub(since) >= idleReleases[done] {
			release()
			done++
		}
	})
}

// sweepLoop runs the keys' sweep every SweepEvery until ctx ends.
func (p *Pacer) sweepLoop(ctx context.Context) {
	tick.Every(ctx, keypace.SweepEvery, func(now time.Time) { p.keys.Sweep(ctx, now) })
}

// CredentialVersioner is a [channels.Sender] whose credential per pacing
// key can be replaced while the pacer runs (`pacer run` with
// PACER_CREDENTIALS_DIR). CredentialVersion returns a number that changes
// whenever key's credential is added, replaced or removed. A breaker that a
// halt (a refused credential) opened is closed as soon as the key's
// version differs from the one its refused request was sent with, so the
// new credential is tried at once rather than at the next half-open probe
// (up to Breaker.MaxOpenFor later).
type CredentialVersioner interface {
	CredentialVersion(key string) uint64
}

// AccountNamer is a Sender that knows which pacing keys share an account
// (a credential per key: the pacer's credentials directory): Account
// returns the name of key's account, "" for the channel's single
// credential. An account-scoped throttle (WhatsApp 80007, 4) then cools
// down the keys of that account only, not every key of the channel.
type AccountNamer interface {
	Account(key string) string
}

// shrinkFrom is the peak size from which a map of ids in hand is made anew
// once it holds a quarter of it or less: a Go map keeps the space of its
// deleted entries for good. Below it the space kept is about 50 KB at most.
const shrinkFrom = 1024

// newKeys makes the pacer's pacing keys: what they need of it (buckets,
// adapter, policy, Redis's failure mode, metrics) from p.
func (p *Pacer) newKeys() *keypace.Keys {
	cfg := keypace.Config{Channel: p.cfg.Channel, Owner: p.cfg.Owner, MaxTokenWait: p.cfg.MaxTokenWait, LeaseSize: p.cfg.LeaseSize,
		Bucket: p.bucket, Fallback: p.fallback, Adapter: p.adapter, Policy: p.policy, Default: control.KeyPolicy(p.policyDefault), Redis: p.redis,
		SlowStart: p.cfg.SlowStart,
		Metrics: keypace.Metrics{BucketCalls: p.m.bucketCallsC, TakeLatency: p.m.takeLatencyO, Lateness: p.m.latenessO,
			LateSlots: p.m.lateSlots.WithLabelValues(), Handoffs: p.m.handoffs.WithLabelValues()}}
	if _, ok := p.sender.(CredentialVersioner); ok {
		cfg.CredentialVersion = p.credentialVersion
	}
	if a, ok := p.sender.(AccountNamer); ok {
		cfg.AccountOf = a.Account
	}
	return keypace.New(cfg)
}
