package webhook

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/pacerhq/pacer/bucket"
	"github.com/pacerhq/pacer/bucket/adapt"
	"github.com/pacerhq/pacer/channels"
	"github.com/pacerhq/pacer/pacer/control"
	"github.com/pacerhq/pacer/pacer/keypace"
)

// Throttles is what [Outcomes.WithThrottles] needs to apply the throttles
// a provider reports in a status webhook (a WhatsApp status "failed" with
// 130429 or 131056 in its errors[]) to the state every `pacer run`
// replica reads, as a throttle in the answer to a send is applied
// (package keypace).
type Throttles struct {
	// Adapter is the keys' shared adaptive state (*adapt.Adapter, with the
	// pacers' Redis prefix).
	Adapter ThrottleAdapter
	// Policy gives each channel's key policy (ceiling, recipient limit,
	// AIMD) as `pacer run` of that channel has it: its configuration and
	// the limits set at run time (control.OverridePolicy). A channel
	// without one applies no throttle.
	Policy map[string]control.Policy
	// Throttle returns, for channel's error code, the scope of the
	// throttle and the least cooldown the pacer keeps for it (the
	// adapter's; whatsapp.ThrottleOf), ok false for a code that is not a
	// throttle.
	Throttle func(channel string, code int) (scope channels.Scope, least time.Duration, ok bool)
}

// ThrottleAdapter is the part of *adapt.Adapter a webhook throttle uses.
type ThrottleAdapter interface {
	Adapted(ctx context.Context, channel, key string, ceiling bucket.Limit, a adapt.AIMD) (adapt.Adapted, error)
	ThrottledAfter(ctx context.Context, channel, key string, ceiling bucket.Limit, a adapt.AIMD, hint time.Duration, accepted int, paced float64) (adapt.Adapted, error)
	PairThrottled(ctx context.Context, channel, key, sub string, base, maxCooldown time.Duration, rate float64) (adapt.Pair, error)
}

// stampResolution is how much earlier than the provider saw it an
// event's At may read: WhatsApp's status timestamps are whole seconds.
const stampResolution = time.Second

// throttles is an Outcomes' state of the webhook throttles it applied.
type throttles struct {
	Throttles
	mu   sync.Mutex
	seen map[string]time.Time // event id -> when it stops mattering (it is stale from then on)
}

// WithThrottles makes o apply the throttles the providers report by
// webhook ([Event] Code of a "failed" status, t.Throttle's scope), once
// per event, to the state the pacers read:
//
//   - key scope (WhatsApp 130429, 131048, 613): one
//     adapt.Adapter.ThrottledAfter of the pacing key, the same Lua as a
//     throttled answer, so throttles of one episode (from a webhook or an
//     answer) cut the rate once, a lone one only sets the cooldown, and
//     the cooldown is the code's least (t.Throttle) clamped to the key's
//     bounds. accepted is 0 (the pacers report their own accepted sends);
//     paced is the key's adapted rate now (the send was paced at it) or,
//     when a decrease came after the event's At, the key's ceiling: the
//     send was paced at the rate before that decrease, so the throttle is
//     the tail of the decrease made and sets the cooldown only;
//   - pair scope (131056): adapt.Adapter.PairThrottled of the pair
//     (key, recipient), named keypace.PairSub of the event's recipient hash
//     as the pacers name it, with keypace.PairThrottle's cooldown and rate;
//   - account scope (80007, 4): not applied, counted as "skipped" (the
//     pacers name an account by a digest of its credential, which this
//     process does not read; Meta documents both for the management
//     endpoints, not /messages).
//
// A throttle is stale, and dropped, when its At is further in the past
// than the window it would act in plus the timestamp's resolution (1 s):
// for key scope max(the key's AIMD Persist, the cooldown it sets), for
// pair scope the pair cooldown it sets. A duplicate event (the same ID:
// the provider's retry) within that window is dropped too: events of one
// pacing key come in its partition, to one consumer. It returns o.
func (o *Outcomes) WithThrottles(t Throttles) *Outcomes {
	o.throttles = &throttles{Throttles: t, seen: map[string]time.Time{}}
	return o
}

// applyThrottles applies the webhook throttles of evs ([Outcomes.WithThrottles]).
// An error leaves the events not yet applied to the batch's next try;
// those applied are not applied again.
func (o *Outcomes) applyThrottles(ctx context.Context, evs []Event) error {
	t := o.throttles
	if t == nil {
		return nil
	}
	now := o.now()
	t.mu.Lock()
	for id, until := range t.seen {
		if !now.Before(until) {
			delete(t.seen, id)
		}
	}
	t.mu.Unlock()
	for _, ev := range evs {
		if ev.Kind != "failed" || ev.Code == 0 || ev.Key == "" || t.Throttle == nil {
			continue
		}
		scope, least, ok := t.Throttle(ev.Channel, ev.Code)
		pol := t.Policy[ev.Channel]
		if !ok || pol == nil {
			continue
		}
		result, err := o.applyThrottle(ctx, t, ev, scope, least, pol)
		if err != nil {
			return err
		}
		o.m.throttles.WithLabelValues(label(ev.Channel, knownChannels), scope.String(), result).Inc()
	}
	return nil
}

// applyThrottle applies one throttle event and returns its result label:
// decreased, cooldown, pair, stale, duplicate or skipped.
func (o *Outcomes) applyThrottle(ctx context.Context, t *throttles, ev Event, scope channels.Scope, least time.Duration, pols control.Policy) (string, error) {
	if scope == channels.ScopeAccount {
		o.log.Warn("account throttle reported by webhook, not applied: the pacers apply an account's throttles from their answers",
			"channel", ev.Channel, "key", ev.Key, "code", ev.Code)
		return "skipped", nil
	}
	if scope == channels.ScopePair && len(ev.Recipients) == 0 {
		return "skipped", nil
	}
	pol, err := pols.KeyPolicy(ctx, ev.Key)
	if err != nil {
		return "", fmt.Errorf("webhook: throttle of %s/%s: policy: %w", ev.Channel, ev.Key, err)
	}
	now := o.now()
	age := now.Sub(ev.At)
	var window time.Duration
	var base, maxCD time.Duration
	var rate float64
	switch scope {
	case channels.ScopePair:
		base, maxCD, rate = pol.PairThrottle(least)
		window = base
	default:
		persist, err := pol.AIMD.PersistFor(pol.Limit)
		if err != nil {
			return "", fmt.Errorf("webhook: throttle of %s/%s: %w", ev.Channel, ev.Key, err)
		}
		window = max(persist, pol.AIMD.CooldownFor(least))
	}
	window += stampResolution
	if age > window {
		o.log.Info("throttle reported by webhook too late to act on; dropped", "channel", ev.Channel, "key", ev.Key,
			"code", ev.Code, "age", age.Round(time.Millisecond), "window", window)
		return "stale", nil
	}
	t.mu.Lock()
	_, dup := t.seen[ev.ID]
	t.mu.Unlock()
	if dup {
		return "duplicate", nil
	}
	result := "pair"
	switch scope {
	case channels.ScopePair:
		pr, err := t.Adapter.PairThrottled(ctx, ev.Channel, ev.Key, keypace.PairSub(ev.Recipients[0]), base, maxCD, rate)
		if err != nil {
			return "", fmt.Errorf("webhook: pair throttle of %s/%s: %w", ev.Channel, ev.Key, err)
		}
		o.log.Info("pair throttle reported by webhook: this recipient waits", "channel", ev.Channel, "key", ev.Key,
			"code", ev.Code, "after", pr.Left, "pair_rate", pr.Rate, "pair_throttles", pr.Throttles)
	default:
		cur, err := t.Adapter.Adapted(ctx, ev.Channel, ev.Key, pol.Limit, pol.AIMD)
		if err != nil {
			return "", fmt.Errorf("webhook: throttle of %s/%s: %w", ev.Channel, ev.Key, err)
		}
		paced := cur.Rate
		if cur.SinceDecrease >= 0 && cur.SinceDecrease < age {
			paced = pol.Limit.PerSecond // sent before the last decrease, at the rate before it
		}
		a, err := t.Adapter.ThrottledAfter(ctx, ev.Channel, ev.Key, pol.Limit, pol.AIMD, least, 0, paced)
		if err != nil {
			return "", fmt.Errorf("webhook: throttle of %s/%s: %w", ev.Channel, ev.Key, err)
		}
		result = "cooldown"
		if a.Decreased {
			result = "decreased"
			o.log.Warn("throttle reported by webhook: rate lowered", "channel", ev.Channel, "key", ev.Key, "code", ev.Code,
				"rate", a.Rate, "ceiling", a.Ceiling, "cooldown", a.CooldownLeft)
		} else {
			o.log.Info("throttle reported by webhook (a lone throttle or one of the same burst: no decrease)", "channel", ev.Channel,
				"key", ev.Key, "code", ev.Code, "rate", a.Rate, "cooldown", a.CooldownLeft)
		}
	}
	t.mu.Lock()
	t.seen[ev.ID] = ev.At.Add(window)
	t.mu.Unlock()
	return result, nil
}
