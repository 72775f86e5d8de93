package keypace

import "github.com/pacerhq/pacer/pacer/inflight"

// InFlight returns how many records of key the pacer may have in hand at
// once (waiting for their slot, their claim or the provider's answer) given
// answers, the key's answer times as the caller measured them: by Little's
// law (see [inflight.Estimator.Bound]) at the key's ceiling rate (the rate
// it may be raised to, not its rate cut by throttles) and burst, at most
// most. A key not in use yet counts with the channel's policy. It never
// calls Redis.
func (p *Keys) InFlight(key string, answers *inflight.Estimator, most int) int {
	lim := p.policyDefault.Limit
	p.mu.RLock()
	st := p.m[key]
	p.mu.RUnlock()
	if st != nil {
		st.mu.Lock()
		cut, ceil := st.limit, st.pol.Limit
		st.mu.Unlock()
		lim.PerSecond, lim.Burst = max(cut.PerSecond, ceil.PerSecond), max(cut.Burst, ceil.Burst)
	}
	return answers.Bound(lim.PerSecond, lim.Burst, most)
}
