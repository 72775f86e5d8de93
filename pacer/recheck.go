package pacer

import (
	"context"
	"time"

	"github.com/pacerhq/pacer/bucket/ledger"
	"github.com/twmb/franz-go/pkg/kgo"
)

// stateReader is the batched read a Ledger may offer (*ledger.Ledger and
// *ledger.Batcher do): the states of many ids in one pipeline.
type stateReader interface {
	Lookup(ctx context.Context, refs []ledger.Ref) ([]ledger.State, error)
}

// lookupTimeout bounds the ledger read of one poll's backlog records: a
// Redis that does not answer leaves them to their claims.
const lookupTimeout = 2 * time.Second

// fetched is one partition's records of a poll, on their way to push.
type fetched struct {
	w    *worker
	rs   []*kgo.Record
	skip []bool // skip[i]: rs[i] was handled already (the ledger says so); nil if none
	// envs[i] is rs[i]'s envelope when skipKnown parsed it (ID ""
	// otherwise); nil if none was: the record's handling takes it rather
	// than parse it again.
	envs []Envelope
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
// (high watermark) of the worker's first fetch, which a previous owner
// may have read; records produced after that cost nothing. The backlog
// records of one poll (all partitions) are read in one [ledger.Ledger]
// Lookup: one pipeline, one ledger.lua call per channel (per pacing key
// under Redis Cluster) of up to 1,000 ids, 5 HMGET fields per id; their
// envelopes are parsed once more for their ids. A record that does not
// parse, a chain copy, a replayed record whose id was dead-lettered (the
// operator decided to send it), and every record when Redis does not
// answer are left to their claims.
func (p *Pacer) skipKnown(ctx context.Context, fs []*fetched) {
	sr, ok := p.ledger.(stateReader)
	if !ok || !p.redisOK.Load() {
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
			if header(r, hChain) != "" {
				continue
			}
			env, err := ParseEnvelope(r.Value)
			if err != nil || (len(r.Key) > 0 && string(r.Key) != env.Key) {
				continue
			}
			if f.envs == nil {
				f.envs = make([]Envelope, len(f.rs))
			}
			f.envs[i] = env
			refs = append(refs, ledger.Ref{Channel: p.cfg.Channel, Key: env.Key, ID: env.ID})
			where = append(where, at{f, i, header(r, hReplayed) == "1"})
		}
	}
	if len(refs) == 0 {
		return
	}
	lctx, cancel := context.WithTimeout(ctx, lookupTimeout)
	defer cancel()
	states, err := sr.Lookup(lctx, refs)
	if err != nil {
		p.m.redisErrors.WithLabelValues().Inc()
		p.log.Debug("ledger read of re-read records failed; their claims decide", "records", len(refs), "err", err)
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
		}
	}
	if n > 0 {
		p.log.Info("records read again were handled already: skipped before their slots", "records", n, "read", len(refs))
	}
}
