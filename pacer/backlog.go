package pacer

import (
	"slices"
	"time"
)

// KeyBacklog is one pacing key's backlog in this process.
type KeyBacklog struct {
	Key    string
	Held   int // records held in memory (waiting or being handled)
	Parked int // records this process parked whose estimated slots are still ahead
}

// Backlog returns the n pacing keys with the largest backlog (held plus
// parked) in this process's partitions, largest first; n <= 0 returns all.
func (p *Pacer) Backlog(n int) []KeyBacklog {
	p.mu.Lock()
	ws := make([]*worker, 0, len(p.workers))
	for _, w := range p.workers {
		ws = append(ws, w)
	}
	p.mu.Unlock()
	by := map[string]*KeyBacklog{}
	now := time.Now()
	for _, w := range ws {
		w.mu.Lock()
		for k, q := range w.keys {
			b := by[k]
			if b == nil {
				b = &KeyBacklog{Key: k}
				by[k] = b
			}
			b.Held += q.size()
			if q.parkedUntil.After(now) {
				b.Parked += int(q.parkedUntil.Sub(now).Seconds() * q.rate)
			}
		}
		w.mu.Unlock()
	}
	out := make([]KeyBacklog, 0, len(by))
	for _, b := range by {
		if b.Held+b.Parked > 0 {
			out = append(out, *b)
		}
	}
	slices.SortFunc(out, func(a, b KeyBacklog) int {
		if d := (b.Held + b.Parked) - (a.Held + a.Parked); d != 0 {
			return d
		}
		if a.Key < b.Key {
			return -1
		}
		return 1
	})
	if n > 0 && len(out) > n {
		out = out[:n]
	}
	return out
}

// Owner names this process in ledger claims (Config.Owner or its default).
func (p *Pacer) Owner() string { return p.cfg.Owner }
