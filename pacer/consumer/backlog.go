package consumer

import (
	"slices"
	"strings"
	"time"
)

// KeyBacklog is one pacing key's backlog in this process.
type KeyBacklog struct {
	Key    string
	Held   int // records held in memory (waiting or being handled)
	Parked int // records this process parked whose estimated slots are still ahead
}

// Total is the key's backlog in this process, Held + Parked: the one
// figure `pacer status` and the status page show for it (summed over the
// running pacers).
func (b KeyBacklog) Total() int { return b.Held + b.Parked }

// KeyStatus is one pacing key as this process shows it on the status
// page: Delivered and Throttled as [KeyActivity] counts them, Backlog its
// [KeyBacklog.Total] (0 when it has none).
type KeyStatus struct {
	Key       string
	Delivered uint64
	Throttled uint64
	Backlog   int
}

// AppendKeyStatus appends to dst every pacing key active in this process
// ([Pacer.AppendActiveKeys]) or with a backlog in it ([Pacer.Backlog]),
// once each, in no particular order, with its delivered count and its
// backlog as Backlog reports it; it returns the extended slice and acts,
// the active keys it read into acts[:0] (pass both back to reuse them).
func (p *Pacer) AppendKeyStatus(dst []KeyStatus, acts []KeyActivity) ([]KeyStatus, []KeyActivity) {
	acts = p.AppendActiveKeys(acts[:0])
	bl, _ := p.backlogs()
	by := make(map[string]int, len(bl))
	for _, b := range bl {
		by[b.Key] = b.Total()
	}
	for _, a := range acts {
		n, ok := by[a.Key]
		if ok {
			delete(by, a.Key)
		}
		dst = append(dst, KeyStatus{Key: a.Key, Delivered: a.Delivered, Throttled: a.Throttled, Backlog: n})
	}
	for _, b := range bl {
		if n, ok := by[b.Key]; ok {
			dst = append(dst, KeyStatus{Key: b.Key, Backlog: n})
		}
	}
	return dst, acts
}

// Backlog returns the n pacing keys with the largest backlog in this
// process, largest first; n <= 0 returns all.
func (p *Pacer) Backlog(n int) []KeyBacklog {
	out, _ := p.backlogs()
	slices.SortFunc(out, func(a, b KeyBacklog) int {
		if d := b.Total() - a.Total(); d != 0 {
			return d
		}
		return strings.Compare(a.Key, b.Key)
	})
	if n > 0 && len(out) > n {
		out = out[:n]
	}
	return out
}

// backlogs returns every key with records waiting in this process, and the
// records held in all. A key's records are held by the workers of several
// partitions (its main partition, the retry tiers its parked copies went
// to), and the partition that parked them estimates how many slots it gave
// out ahead (or, for a strict-order key, counts its chain's copies not yet
// finished), which covers the copies another worker now holds; so Held sums
// the workers and Parked is what the largest estimate adds to that sum.
func (p *Pacer) backlogs() ([]KeyBacklog, int) {
	p.mu.Lock()
	ws := make([]*worker, 0, len(p.workers))
	for _, w := range p.workers {
		ws = append(ws, w)
	}
	p.mu.Unlock()
	type acc struct{ held, best int }
	by := map[string]*acc{}
	now := time.Now()
	held := 0
	for _, w := range ws {
		w.mu.Lock()
		held += w.held
		for k, q := range w.keys {
			a := by[k]
			if a == nil {
				a = &acc{}
				by[k] = a
			}
			n := q.size()
			a.held += n
			if q.parkedUntil.After(now) {
				n += int(q.parkedUntil.Sub(now).Seconds() * q.rate)
			}
			if c := w.chains[k]; c != nil {
				n += len(c.pend)
			}
			a.best = max(a.best, n)
		}
		for k, c := range w.chains {
			if w.keys[k] == nil {
				a := by[k]
				if a == nil {
					a = &acc{}
					by[k] = a
				}
				a.best = max(a.best, len(c.pend))
			}
		}
		w.mu.Unlock()
	}
	out := make([]KeyBacklog, 0, len(by))
	for k, a := range by {
		if a.held > 0 || a.best > 0 {
			out = append(out, KeyBacklog{Key: k, Held: a.held, Parked: max(0, a.best-a.held)})
		}
	}
	return out, held
}

// Owner names this process in ledger claims (Config.Owner or its default).
func (p *Pacer) Owner() string { return p.cfg.Owner }
