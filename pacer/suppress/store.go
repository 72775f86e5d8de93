package suppress

import (
	"context"
	"fmt"
	"time"

	"github.com/pacerhq/pacer/bucket"
	"github.com/pacerhq/pacer/internal/wire"
	"github.com/pacerhq/pacer/lua"
	"github.com/redis/go-redis/v9"
)

// chunk is how many entries one suppress_add.lua call (or one HDEL)
// carries: a call holds Redis for about a millisecond.
const chunk = 1000

// prunePerCall is how many expired entries an add removes beyond its own
// count: expired entries never outnumber what adds left behind, and a key
// that takes no more adds stops growing.
const prunePerCall = 100

var addScript = redis.NewScript(lua.SuppressAdd)

// Store reads and writes the suppressions of pacing keys in Redis. It is
// safe for concurrent use.
type Store struct {
	rdb  redis.Cmdable
	keys bucket.Keys
}

// NewStore returns a Store over rdb naming its keys with keys (the
// limiter's, as the ledger's claim names them).
func NewStore(rdb redis.Cmdable, keys bucket.Keys) *Store { return &Store{rdb: rdb, keys: keys} }

// Add writes entries (replacing an entry of the same hash) for channel's
// pacing key key, in one pipeline of one script call per 1,000 entries
// (one round trip per Redis node), and removes expired entries of the key
// (up to the entries' count + 100). It returns how many entries were new.
// An entry without a hash or with an unknown reason is an error, and
// nothing is written.
func (s *Store) Add(ctx context.Context, channel, key string, entries ...Entry) (added int, err error) {
	for i, e := range entries {
		if _, err := RecipientHash(HashPrefix + e.Hash); err != nil {
			return 0, fmt.Errorf("suppress: entry %d: %w", i+1, err)
		}
		if _, err := ParseReason(string(e.Reason)); err != nil {
			return 0, fmt.Errorf("suppress: entry %d: %w", i+1, err)
		}
	}
	if len(entries) == 0 {
		return 0, nil
	}
	keys := []string{s.keys.Suppressed(channel, key), s.keys.SuppressedExpiry(channel, key)}
	argvs := make([][]any, 0, (len(entries)+chunk-1)/chunk)
	for start := 0; start < len(entries); start += chunk {
		part := entries[start:min(start+chunk, len(entries))]
		argv := make([]any, 1, 1+3*len(part))
		argv[0] = len(part) + prunePerCall
		for _, e := range part {
			argv = append(argv, e.Hash, e.value(), ms(e.Expires))
		}
		argvs = append(argvs, argv)
	}
	cmds, err := s.pipe(ctx, keys, argvs)
	if err != nil {
		return 0, fmt.Errorf("suppress: add %d entries to %s/%s: %w", len(entries), channel, key, err)
	}
	for _, c := range cmds {
		v, _ := c.Result()
		r, _ := v.([]any)
		if len(r) != 2 {
			return added, fmt.Errorf("suppress: add to %s/%s: unexpected reply %v", channel, key, v)
		}
		n, _ := r[0].(int64)
		added += int(n)
	}
	return added, nil
}

// pipe runs one suppress_add.lua call per argv in one pipeline, again with
// the script's text if Redis had not cached it.
func (s *Store) pipe(ctx context.Context, keys []string, argvs [][]any) ([]*redis.Cmd, error) {
	run := func(eval func(p redis.Pipeliner, argv []any) *redis.Cmd) ([]*redis.Cmd, error) {
		p := s.rdb.Pipeline()
		cmds := make([]*redis.Cmd, len(argvs))
		for i, a := range argvs {
			cmds[i] = eval(p, a)
		}
		_, err := p.Exec(ctx)
		return cmds, err
	}
	cmds, err := run(func(p redis.Pipeliner, a []any) *redis.Cmd { return p.EvalSha(ctx, addScript.Hash(), keys, a...) })
	if wire.NoScript(err) {
		cmds, err = run(func(p redis.Pipeliner, a []any) *redis.Cmd { return p.Eval(ctx, lua.SuppressAdd, keys, a...) })
	}
	return cmds, err
}

// Remove deletes the entries of hashes of channel's pacing key key (one
// pipeline) and returns how many there were.
func (s *Store) Remove(ctx context.Context, channel, key string, hashes ...string) (int, error) {
	h, z := s.keys.Suppressed(channel, key), s.keys.SuppressedExpiry(channel, key)
	p := s.rdb.Pipeline()
	var dels []*redis.IntCmd
	for start := 0; start < len(hashes); start += chunk {
		part := hashes[start:min(start+chunk, len(hashes))]
		dels = append(dels, p.HDel(ctx, h, part...))
		members := make([]any, len(part))
		for i, f := range part {
			members[i] = f
		}
		p.ZRem(ctx, z, members...)
	}
	if len(dels) == 0 {
		return 0, nil
	}
	if _, err := p.Exec(ctx); err != nil {
		return 0, fmt.Errorf("suppress: remove %d entries of %s/%s: %w", len(hashes), channel, key, err)
	}
	n := 0
	for _, d := range dels {
		n += int(d.Val())
	}
	return n, nil
}

// Get returns the entry of hash h of channel's pacing key key and true, or
// false when there is none or it expired by now.
func (s *Store) Get(ctx context.Context, channel, key, h string, now time.Time) (Entry, bool, error) {
	v, err := s.rdb.HGet(ctx, s.keys.Suppressed(channel, key), h).Result()
	if err == redis.Nil {
		return Entry{}, false, nil
	}
	if err != nil {
		return Entry{}, false, fmt.Errorf("suppress: read %s/%s: %w", channel, key, err)
	}
	e, err := parseEntry(h, v)
	if err != nil {
		return Entry{}, false, err
	}
	return e, e.Live(now), nil
}

// Registered is what a registration feed calls when the app registered the
// device token of hash h again at at: an [Unregistered] entry the provider
// saw before at (APNs: a token registered after its 410 timestamp is valid
// again) is removed, and Registered reports true. Any other entry stays.
// The read and the removal are two calls: a 410 written between them is
// removed too, and the next send to the token, answered 410 again,
// suppresses it anew.
func (s *Store) Registered(ctx context.Context, channel, key, h string, at time.Time) (bool, error) {
	e, ok, err := s.Get(ctx, channel, key, h, time.Now())
	if err != nil || !ok || e.Reason != Unregistered || !e.At.Before(at) {
		return false, err
	}
	n, err := s.Remove(ctx, channel, key, h)
	return n > 0, err
}

// List calls fn with every entry of channel's pacing key key live at now,
// in no order, reading 1,000 at a time (HSCAN: an entry added or removed
// meanwhile may be seen or not). It stops at fn's first error and returns
// it; an entry Redis holds in another shape is an error.
func (s *Store) List(ctx context.Context, channel, key string, now time.Time, fn func(Entry) error) error {
	h := s.keys.Suppressed(channel, key)
	var cursor uint64
	for {
		kv, next, err := s.rdb.HScan(ctx, h, cursor, "", chunk).Result()
		if err != nil {
			return fmt.Errorf("suppress: list %s/%s: %w", channel, key, err)
		}
		for i := 0; i+1 < len(kv); i += 2 {
			e, err := parseEntry(kv[i], kv[i+1])
			if err != nil {
				return err
			}
			if !e.Live(now) {
				continue
			}
			if err := fn(e); err != nil {
				return err
			}
		}
		if next == 0 {
			return nil
		}
		cursor = next
	}
}
