// Package history keeps the status page's last hour of each pacing key:
// one point per [Step] (10 s) for [Span] (60 minutes), with the messages
// delivered, the throttles and the backlog.
//
// Each `pacer run` replica keeps its own keys' points in memory (a
// [Recorder], fed by its status page publisher at each reading) and writes
// them to Redis, one hash per replica that lives for an hour after its
// last write; a page reads every replica's entries of the keys it shows
// and adds them up ([Read]). So every replica's page shows the same
// history, and a replica that stopped or restarted within the hour still
// counts for the time it ran (decision 0041).
//
// Redis layout, for prefix "pacer" and channel "whatsapp" (the hash tag
// keeps them in the status page's Redis Cluster slot):
//
//	pacer:status:{whatsapp}:history              sorted set: replica -> Unix ms of its last history write
//	pacer:status:{whatsapp}:history:<replica>    hash: pacing key -> the replica's points of it (Encode)
//
// Bounds: a replica keeps at most its Recorder's MaxKeys keys (default
// [DefaultKeys]), those with the most activity; a key kept is about
// 4.9 KB of memory ([RingBytes]), and its Redis entry at most 5 bytes a point
// plus 12 (about 1.8 KB for a key busy the whole hour; an idle stretch
// costs 3 bytes a point, and none before the key's first activity).
package history

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"slices"
	"time"
	"unsafe"
)

// Resolution and length of the history.
const (
	Step   = 10 * time.Second
	Points = 360 // Span / Step
	Span   = Points * Step
	// DefaultKeys is how many keys a Recorder keeps by default: about
	// 4.9 MB (RingBytes).
	DefaultKeys = 1000
)

// RingBytes is the size of one kept key's ring: 12 bytes a point and 16.
// Allocated, with its map entry, it takes about 4.9 KB (Go's allocation
// class for it is 4,864 bytes; TestRingBytes measures it).
const RingBytes = int(unsafe.Sizeof(ring{}))

// Slot returns the number of the Step-long slot t falls in: Unix time
// divided by Step. Every replica numbers slots alike, so their points add up.
func Slot(t time.Time) int64 { return t.UnixMilli() / Step.Milliseconds() }

// SlotStart returns the time slot s begins.
func SlotStart(s int64) time.Time { return time.UnixMilli(s * Step.Milliseconds()).UTC() }

// Point is one key's step in one replica: 12 bytes.
type Point struct {
	// Delivered is the messages the provider accepted in the step: a
	// reading's deliveries are shared among the steps it spans in
	// proportion to their time in it, so it is fractional.
	Delivered float32
	Throttles uint32 // throttles counted by the reading that ended in the step
	Backlog   uint32 // the key's backlog at the step's last reading
}

func (p Point) zero() bool { return p == Point{} }

// ring is one key's last Points steps: pts[s%Points] is slot s, for s in
// (newest-Points, newest].
type ring struct {
	newest int64
	dirty  bool // changed since it was last encoded
	pts    [Points]Point
}

// advance makes s the newest slot (when later), zeroing the slots it
// passes over.
func (r *ring) advance(s int64) {
	if s <= r.newest {
		return
	}
	if s-r.newest >= Points {
		clear(r.pts[:])
	} else {
		for i := r.newest + 1; i <= s; i++ {
			r.pts[i%Points] = Point{}
		}
	}
	r.newest = s
}

// point returns slot s's point, or nil when s left the ring.
func (r *ring) point(s int64) *Point {
	r.advance(s)
	if s <= r.newest-Points {
		return nil
	}
	return &r.pts[s%Points]
}

// add records one reading of the key covering (from, to]: delivered and
// throttles since the previous one, backlog at to.
func (r *ring) add(from, to time.Time, delivered, throttles uint64, backlog int) {
	step := Step.Milliseconds()
	a, b := from.UnixMilli(), to.UnixMilli()
	a = max(a, b-Span.Milliseconds())
	// The reading covers (a, b]: a reading at a step's end is the step's
	// last, not the next one's first.
	end := r.point((b - 1) / step)
	if end == nil {
		return
	}
	bl := uint32(min(max(backlog, 0), math.MaxUint32))
	if delivered > 0 || throttles > 0 || end.Backlog != bl {
		r.dirty = true
	}
	end.Throttles += uint32(min(throttles, math.MaxUint32))
	end.Backlog = bl
	if delivered == 0 {
		return
	}
	if b <= a {
		end.Delivered += float32(delivered)
		return
	}
	for t := a; t < b; {
		s := t / step
		e := min((s+1)*step, b)
		if p := r.point(s); p != nil {
			p.Delivered += float32(float64(delivered) * float64(e-t) / float64(b-a))
		}
		t = e
	}
}

// activity is the ring's messages delivered, throttles and backlog
// summed over its points: how a Recorder ranks the keys it keeps.
func (r *ring) activity() float64 {
	var n float64
	for _, p := range r.pts {
		n += float64(p.Delivered) + float64(p.Throttles) + float64(p.Backlog)
	}
	return n
}

// Recorder keeps one replica's history of its most active keys. It is not
// safe for concurrent use: its publisher's loop alone calls it.
type Recorder struct {
	max     int
	rings   map[string]*ring
	waiting map[string]reading // keys refused at the cap since the last Flush: their last reading
	gone    []string           // keys dropped since the last Flush
	peak    int
}

type reading struct {
	from, to             time.Time
	delivered, throttles uint64
	backlog              int
}

func (r reading) activity() float64 {
	return float64(r.delivered) + float64(r.throttles) + float64(r.backlog)
}

// NewRecorder returns a Recorder that keeps at most maxKeys keys
// (DefaultKeys when maxKeys <= 0).
func NewRecorder(maxKeys int) *Recorder {
	if maxKeys <= 0 {
		maxKeys = DefaultKeys
	}
	return &Recorder{max: maxKeys, rings: map[string]*ring{}, waiting: map[string]reading{}}
}

// Len returns how many keys r keeps.
func (r *Recorder) Len() int { return len(r.rings) }

// Add records one reading of key covering (from, to]: the messages
// delivered and the throttles since the previous reading, and the
// backlog at to. A key with nothing (all 0) and no history yet is not
// kept; a new key while r keeps MaxKeys waits for the next Flush, which
// keeps it instead of the kept key with the least activity if it had
// more in this reading than that key had in the hour.
func (r *Recorder) Add(key string, from, to time.Time, delivered, throttles uint64, backlog int) {
	if rg := r.rings[key]; rg != nil {
		rg.add(from, to, delivered, throttles, backlog)
		return
	}
	rd := reading{from, to, delivered, throttles, backlog}
	if rd.activity() == 0 {
		return
	}
	if len(r.rings) < r.max {
		r.keep(key, rd)
		return
	}
	if _, ok := r.waiting[key]; ok || len(r.waiting) < r.max {
		r.waiting[key] = rd
	}
}

func (r *Recorder) keep(key string, rd reading) {
	rg := &ring{newest: (rd.to.UnixMilli() - 1) / Step.Milliseconds()}
	rg.add(rd.from, rd.to, rd.delivered, rd.throttles, rd.backlog)
	r.rings[key] = rg
	r.peak = max(r.peak, len(r.rings))
}

// Flush takes the keys waiting at the cap in (see Add), drops the keys
// with no activity for a whole Span before now, and appends to fields
// each key changed since the last Flush and its encoding (Encode): the
// pairs of an HSET. It returns them and the keys dropped since the last
// Flush (to HDEL).
func (r *Recorder) Flush(now time.Time, fields []any) ([]any, []string) {
	if len(r.waiting) > 0 {
		type cand struct {
			key string
			act float64
		}
		kept := make([]cand, 0, len(r.rings))
		for k, rg := range r.rings {
			kept = append(kept, cand{k, rg.activity()})
		}
		slices.SortFunc(kept, func(a, b cand) int { return cmpFloat(a.act, b.act) })
		waiting := make([]cand, 0, len(r.waiting))
		for k, rd := range r.waiting {
			waiting = append(waiting, cand{k, rd.activity()})
		}
		slices.SortFunc(waiting, func(a, b cand) int { return cmpFloat(b.act, a.act) })
		for i, w := range waiting {
			if i >= len(kept) || w.act <= kept[i].act {
				break
			}
			delete(r.rings, kept[i].key)
			r.gone = append(r.gone, kept[i].key)
			r.keep(w.key, r.waiting[w.key])
		}
		clear(r.waiting)
	}
	last := Slot(now)
	for k, rg := range r.rings {
		if last-rg.newest >= Points {
			delete(r.rings, k)
			r.gone = append(r.gone, k)
		}
	}
	if r.peak >= 1024 && len(r.rings) <= r.peak/4 {
		// A Go map keeps the space of its deleted entries.
		r.rings, r.peak = maps2(r.rings), len(r.rings)
	}
	for k, rg := range r.rings {
		if rg.dirty {
			fields = append(fields, k, rg.encode())
			rg.dirty = false
		}
	}
	gone := r.gone
	r.gone = nil
	return fields, gone
}

// Rewrite marks every kept key changed, so the next Flush returns all
// of them (after a failed write, or a Redis that lost them).
func (r *Recorder) Rewrite() {
	for _, rg := range r.rings {
		rg.dirty = true
	}
}

func maps2(m map[string]*ring) map[string]*ring {
	n := make(map[string]*ring, len(m))
	for k, v := range m {
		n[k] = v
	}
	return n
}

func cmpFloat(a, b float64) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

// encodingV1 is the first byte of an encoding.
const encodingV1 = 1

// encode writes the ring: version 1, uvarint newest slot, uvarint n, then
// its last n points oldest first (those before its first non-zero one left
// out), each uvarint delivered in tenths, uvarint throttles, uvarint
// backlog.
func (r *ring) encode() string {
	first := 0
	for first < Points && r.pts[(r.newest-Points+1+int64(first))%Points].zero() {
		first++
	}
	n := Points - first
	b := make([]byte, 0, 2+2*binary.MaxVarintLen64+5*n)
	b = append(b, encodingV1)
	b = binary.AppendUvarint(b, uint64(r.newest))
	b = binary.AppendUvarint(b, uint64(n))
	for i := first; i < Points; i++ {
		p := r.pts[(r.newest-Points+1+int64(i))%Points]
		b = binary.AppendUvarint(b, uint64(math.Round(float64(p.Delivered)*10)))
		b = binary.AppendUvarint(b, uint64(p.Throttles))
		b = binary.AppendUvarint(b, uint64(p.Backlog))
	}
	return string(b)
}

// errEncoding is a Redis entry that is not an encoding this version reads.
var errEncoding = errors.New("history: not a version 1 encoding of a key's points")

// Decode reads what a Recorder wrote for one key: the slot of its newest
// point and its points, oldest first (at most Points); the slots after
// newest had none. Its error names what is wrong.
func Decode(s string) (newest int64, pts []Point, err error) {
	b := []byte(s)
	if len(b) == 0 || b[0] != encodingV1 {
		return 0, nil, errEncoding
	}
	b = b[1:]
	next := func(what string) (uint64, error) {
		v, n := binary.Uvarint(b)
		if n <= 0 {
			return 0, fmt.Errorf("%w: %s cut short", errEncoding, what)
		}
		b = b[n:]
		return v, nil
	}
	nw, err := next("newest slot")
	if err != nil {
		return 0, nil, err
	}
	n, err := next("point count")
	if err != nil {
		return 0, nil, err
	}
	if n > Points {
		return 0, nil, fmt.Errorf("%w: %d points, at most %d", errEncoding, n, Points)
	}
	pts = make([]Point, n)
	for i := range pts {
		d, err := next("delivered")
		if err != nil {
			return 0, nil, err
		}
		th, err := next("throttles")
		if err != nil {
			return 0, nil, err
		}
		bl, err := next("backlog")
		if err != nil {
			return 0, nil, err
		}
		pts[i] = Point{Delivered: float32(d) / 10, Throttles: uint32(min(th, math.MaxUint32)), Backlog: uint32(min(bl, math.MaxUint32))}
	}
	if len(b) > 0 {
		return 0, nil, fmt.Errorf("%w: %d bytes after the points", errEncoding, len(b))
	}
	return int64(nw), pts, nil
}
