package consumer

import (
	"context"
	"slices"
	"time"

	"github.com/pacerhq/pacer/pacer/envelope"
	"github.com/pacerhq/pacer/pacer/ledger"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
)

// lookupTimeout bounds the ledger read of one poll's backlog records: a
// Redis that does not answer leaves them to their claims.
const lookupTimeout = 2 * time.Second

// horizonAhead is how far past the records in hand a horizon is set, in
// offsets: a partition's horizon is written once per that many records
// at most, and a next owner reads at most that many records of it in the
// ledger needlessly.
const horizonAhead = 4096

// ledgerMissed counts a failed ledger call of the horizon bookkeeping as a
// Redis error and logs it at debug level with args: each caller goes on
// without what it asked for (see its message).
func (p *Pacer) ledgerMissed(msg string, err error, args ...any) {
	p.m.redisErrors.WithLabelValues().Inc()
	p.log.Debug(msg, append(args, "err", err)...)
}

// horizons bounds, for the partitions of a poll, the records skipKnown
// reads in the ledger, and records how far this process may handle.
//
// A worker's first fetch reads its partition's horizon
// ([ledger.Batcher.Horizons]: one more than the highest offset an owner
// may have handled): only the records below it, and below the high watermark, can have been
// claimed before. No horizon recorded means no owner handled a record
// of the partition within the ledger's TTL (or one that did ran a version
// without horizons: its records read again are then claimed as usual,
// each taking a send slot before its claim finds it handled; none is sent
// twice). When the horizon cannot be read, every record below the high
// watermark is read in the ledger, as without horizons.
//
// Before records at or past the horizon are queued, a higher one is
// written (the last record's offset + 1 + horizonAhead): one round trip
// for every partition of the poll that needs one, once per horizonAhead
// records of a partition at most. A write that fails is tried again at the
// next poll; the records are queued meanwhile (a crash before the write
// lands costs their next owner send slots, not a second send: claims
// decide).
func (p *Pacer) horizons(ctx context.Context, fs []*fetched) {
	var first []*fetched
	for _, f := range fs {
		if f.w.backlogEnd < 0 {
			f.w.backlogEnd = f.hwm // unless the horizon says less (below)
			f.w.rereadEnd = f.hwm  // unless a stop horizon or the horizon says less
			first = append(first, f)
		}
	}
	if !p.redisOK.Load() {
		return
	}
	part := func(f *fetched) ledger.Partition {
		return ledger.Partition{Group: p.cfg.Group, Topic: f.w.tp.topic, Partition: f.w.tp.partition}
	}
	hctx, cancel := context.WithTimeout(ctx, lookupTimeout)
	defer cancel()
	if len(first) > 0 {
		ps := make([]ledger.Partition, len(first))
		for i, f := range first {
			ps[i] = part(f)
		}
		offs, err := p.ledger.Horizons(hctx, p.cfg.Channel, ps)
		if err != nil {
			p.ledgerMissed("partition horizons unreadable; the whole backlog is read in the ledger", err)
		} else {
			for i, f := range first {
				f.w.backlogEnd = min(f.hwm, max(offs[i], 0))
				f.w.rereadEnd = f.w.backlogEnd
				f.w.horizon = offs[i]
			}
		}
		// A stop horizon is read only when the horizons were (Redis
		// answers): without them every record below the high watermark
		// counts as read again.
		if err == nil {
			stops, err := p.ledger.TakeStopHorizons(hctx, p.cfg.Channel, ps)
			if err != nil {
				p.ledgerMissed("stop horizons unreadable; records below the horizons count as read again", err)
			} else {
				for i, f := range first {
					if stops[i] >= 0 {
						f.w.rereadEnd = min(f.hwm, stops[i])
					}
				}
			}
		}
	}
	var ps []ledger.Partition
	var offs []int64
	var ws []*worker
	for _, f := range fs {
		if last := f.rs[len(f.rs)-1].Offset; last >= f.w.horizon {
			ps = append(ps, part(f))
			offs = append(offs, last+1+horizonAhead)
			ws = append(ws, f.w)
		}
	}
	if len(ps) == 0 {
		return
	}
	if err := p.ledger.SetHorizons(hctx, p.cfg.Channel, ps, offs); err != nil {
		p.ledgerMissed("partition horizons not written; tried again at the next poll", err)
		return
	}
	for i, w := range ws {
		w.horizon = offs[i]
	}
}

// fetched is one partition's records of a poll, on their way to push.
type fetched struct {
	w    *worker
	hwm  int64 // the partition's high watermark at this fetch
	rs   []*kgo.Record
	skip []bool // skip[i]: rs[i] was handled already (the ledger says so); nil if none
	// envs[i] is rs[i]'s envelope when skipKnown parsed it (ID ""
	// otherwise); nil if none was: the record's handling takes it rather
	// than parse it again.
	envs []envelope.Envelope
}

// skipKnown finds the records of a poll that were handled already, before
// they are queued: after a crash the partition's next owner reads again
// every record past the last commit, most of them delivered (or
// dead-lettered) by the process that died, and each would take one of its
// key's send slots before its claim found that out (a restart at 50
// msgs/s skipped 250 records per 5 s at the key's pace). Such records
// are finished as duplicates without a slot (see worker.push).
//
// Only a partition's backlog is read: the records below the end offset
// (high watermark) of the worker's first fetch and below the partition's
// horizon (see [Pacer.horizons]), which a previous owner may have handled;
// records produced after that, and a backlog no owner handled, cost
// nothing. The backlog
// records of one poll (all partitions) are read in one ledger
// Lookup: one pipeline, one ledger.lua call per channel (per pacing key
// under Redis Cluster) of up to 1,000 ids, 5 HMGET fields per id; their
// envelopes are parsed once more for their ids. A record that does not
// parse, a chain copy, a replayed record whose id was dead-lettered (the
// operator decided to send it), and every record when Redis does not
// answer are left to their claims.
func (p *Pacer) skipKnown(ctx context.Context, fs []*fetched) {
	if !p.redisOK.Load() {
		return
	}
	type at struct {
		f        *fetched
		i        int
		replayed bool
	}
	var refs []ledger.Ref
	var where []at
	for _, f := range fs {
		end := f.w.backlogEnd
		for i, r := range f.rs {
			if r.Offset >= end {
				break
			}
			if envelope.Header(r, envelope.HeaderChain) != "" {
				continue
			}
			env, err := envelope.Parse(r.Value)
			if err != nil || (len(r.Key) > 0 && string(r.Key) != env.Key) {
				continue
			}
			if f.envs == nil {
				f.envs = make([]envelope.Envelope, len(f.rs))
			}
			f.envs[i] = env
			refs = append(refs, ledger.Ref{Channel: p.cfg.Channel, Key: env.Key, ID: env.ID})
			where = append(where, at{f, i, envelope.Header(r, envelope.HeaderReplayed) == "1"})
		}
	}
	if len(refs) == 0 {
		return
	}
	lctx, cancel := context.WithTimeout(ctx, lookupTimeout)
	defer cancel()
	states, err := p.ledger.Lookup(lctx, refs)
	if err != nil {
		p.ledgerMissed("ledger read of re-read records failed; their claims decide", err, "records", len(refs))
	}
	n := 0
	for j, s := range states {
		a := where[j]
		if s == ledger.StateDelivered || (s == ledger.StateDeadLettered && !a.replayed) {
			if a.f.skip == nil {
				a.f.skip = make([]bool, len(a.f.rs))
			}
			a.f.skip[a.i] = true
			n++
			if s == ledger.StateDelivered {
				// Its outcome again: one written before a crash may not
				// have reached Kafka (the callbacks count it once).
				p.deliveredOutcome(&a.f.envs[a.i])
			}
		}
	}
	if n > 0 {
		p.log.Info("records read again were handled already: skipped before their slots", "records", n, "read", len(refs))
	}
}

// tightenHorizons records, for each of ws stopped cleanly (a revoke or a
// shutdown, after the commit that followed), its partition's stop horizon:
// one more than the highest offset it fetched, and at least its rereadEnd
// (what a previous owner may have handled), tighter than the horizon,
// which runs up to horizonAhead offsets ahead. The next owner takes it
// ([ledger.Batcher.TakeStopHorizons]) before it handles anything: records
// below it were read by an owner before, those past it (published after
// the stop) were not, so a duplicate among them (a campaign published
// again while no pacer ran) counts in its campaign's duplicates (see
// [Pacer.republished]) rather than reading as a record read again; the
// records below the horizon are still read in the ledger before their
// slots. One round trip; a failure (logged at debug) leaves none, so the
// next owner takes the horizon as the bound. Workers that fetched nothing
// are left out unless their partition's committed offset is its end
// offset (see [Pacer.idleStopHorizons]): an owner that took over after a
// crash and found nothing to read still leaves the bound, so a campaign
// published again after it stopped counts as duplicates.
func (p *Pacer) tightenHorizons(ctx context.Context, cl *kgo.Client, ws []*worker) {
	if !p.redisOK.Load() {
		return
	}
	hctx, cancel := context.WithTimeout(ctx, lookupTimeout)
	defer cancel()
	var ps []ledger.Partition
	var offs []int64
	var idle []*worker
	for _, w := range ws {
		if h := w.stopHorizon.Load(); h > 0 {
			ps = append(ps, ledger.Partition{Group: p.cfg.Group, Topic: w.tp.topic, Partition: w.tp.partition})
			offs = append(offs, h)
		} else {
			idle = append(idle, w)
		}
	}
	for i, h := range p.idleStopHorizons(hctx, cl, idle) {
		if h > 0 {
			ps = append(ps, ledger.Partition{Group: p.cfg.Group, Topic: idle[i].tp.topic, Partition: idle[i].tp.partition})
			offs = append(offs, h)
		}
	}
	if len(ps) == 0 {
		return
	}
	if err := p.ledger.SetStopHorizons(hctx, p.cfg.Channel, ps, offs); err != nil {
		p.ledgerMissed("partition stop horizons not written; the next owners count the records below the horizons as read again", err)
	}
}

// idleStopHorizons returns, for each of ws (workers that fetched nothing),
// the stop horizon its partition can be given, or 0 for none: the
// partition's end offset when the group's committed offset is at it. Every
// record below was handled by an owner and committed, and none past it
// existed, so any record past it was published after this stop. When the
// commit is below the end, an owner before this one that crashed may have
// handled records past the commit: none is given, as before. Two round
// trips (ListOffsets, OffsetFetch) when ws is not empty; a failure (logged
// at debug) gives none.
func (p *Pacer) idleStopHorizons(ctx context.Context, cl *kgo.Client, ws []*worker) []int64 {
	out := make([]int64, len(ws))
	if len(ws) == 0 || cl == nil {
		return out
	}
	var topics []string
	for _, w := range ws {
		if !slices.Contains(topics, w.tp.topic) {
			topics = append(topics, w.tp.topic)
		}
	}
	adm := kadm.NewClient(cl)
	ends, err := adm.ListEndOffsets(ctx, topics...)
	if err != nil {
		p.log.Debug("end offsets unread: partitions that fetched nothing leave no stop horizon", "err", err)
		return out
	}
	commits, err := adm.FetchOffsets(ctx, p.cfg.Group)
	if err == nil {
		err = commits.Error()
	}
	if err != nil {
		p.log.Debug("committed offsets unread: partitions that fetched nothing leave no stop horizon", "err", err)
		return out
	}
	for i, w := range ws {
		e, ok := ends.Lookup(w.tp.topic, w.tp.partition)
		c, ok2 := commits.Lookup(w.tp.topic, w.tp.partition)
		if ok && ok2 && e.Err == nil && c.Err == nil && e.Offset > 0 && c.At == e.Offset {
			out[i] = e.Offset
		}
	}
	return out
}
