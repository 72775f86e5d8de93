package consumer

import "slices"

// KeyActivity is one active pacing key as this process sees it, for a
// status page that adds up every replica's view (statuspage.KeyActivity
// has the same fields, so one converts to the other). 32 bytes: a
// publisher keeps one per active key between its readings.
type KeyActivity struct {
	Key string
	// Delivered counts the key's messages the provider accepted through
	// this process since the key became active here (it restarts from 0
	// when an idle key's state is freed); a reader derives the achieved
	// rate from two readings.
	Delivered uint64
	// InHand is the key's records this process is handling now: fetched,
	// not yet finished (waiting for a token, being sent).
	InHand int
}

// ActiveKeys returns the pacing keys this process handled in the last 5
// minutes (or has records of in hand), in no particular order (a status
// reading of 100,000 keys every 5 s need not sort them). It takes the key
// table's lock briefly and calls neither Redis nor Kafka; it is safe for
// concurrent use.
func (p *Pacer) ActiveKeys() []KeyActivity { return p.AppendActiveKeys(nil) }

// AppendActiveKeys appends to dst what ActiveKeys returns, and returns the
// extended slice: a caller that reads every few seconds passes its last
// result's dst[:0] and makes no garbage (100,000 keys every 5 s were 67 MB
// a minute of it, in a process with nothing to send).
func (p *Pacer) AppendActiveKeys(dst []KeyActivity) []KeyActivity {
	now := nowInstant()
	p.keys.mu.Lock()
	out := slices.Grow(dst, len(p.keys.m))
	for k, st := range p.keys.m {
		st.mu.Lock()
		if st.users > 0 || now.Sub(st.lastSeen) <= activeFor {
			out = append(out, KeyActivity{Key: k, Delivered: st.delivered.Load(), InHand: int(st.users)})
		}
		st.mu.Unlock()
	}
	p.keys.mu.Unlock()
	return out
}
