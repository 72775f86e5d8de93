package ledger

import (
	"context"
	"fmt"
	"strings"
)

// ByProvider returns the envelope id that channel's pacing key key sent as
// the provider's message id providerID (a wamid, an sg_message_id), and the
// campaign its delivered mark named ("" none): what a provider event that
// carries no envelope id is matched by. ok is false when the ledger holds
// no mark with that provider id (none was written, or it is older than the
// ledger's TTL: the provider-id field lives in the mark's hash and goes
// with it). One script call that writes nothing; errors wrap the Redis
// error.
//
// Memory: each delivered mark with a provider id adds one field to its
// generation's hash: "<pacing key>\n\x01<provider id>" (the pacing key's
// hash under Redis Cluster: "\x01<provider id>") -> "i:<envelope id>"
// ("\n<campaign>" after it when the mark has one); TestProviderIndexBytes
// measures what it costs on redis-server.
func (l *Ledger) ByProvider(ctx context.Context, channel, key, providerID string) (id, campaign string, ok bool, err error) {
	if providerID == "" {
		return "", "", false, nil
	}
	s, err := l.run(ctx, op{kind: 'p', channel: channel, key: key, id: "\x01" + providerID})
	if err != nil {
		return "", "", false, fmt.Errorf("ledger: read provider id %q of %s:%s: %w", providerID, channel, key, err)
	}
	v, found := strings.CutPrefix(s, "i:")
	if !found {
		if s != "none" {
			return "", "", false, fmt.Errorf("ledger: read provider id %q of %s:%s: unexpected reply %q", providerID, channel, key, s)
		}
		return "", "", false, nil
	}
	id, campaign, _ = strings.Cut(v, "\n")
	return id, campaign, true, nil
}

// Outcome reads what the ledger holds for id, writing nothing: "delivered",
// "claimed" (no outcome recorded: a send in flight, or one whose process
// died), "dead-lettered:<reason>" (the reason its DLQ copy was written
// with, [Ledger.DeadLettered]) or "none". A webhook's outcome resolves an
// unknown one by it. Errors wrap the Redis error.
func (l *Ledger) Outcome(ctx context.Context, channel, key, id string) (string, error) {
	s, err := l.run(ctx, op{kind: 'u', channel: channel, key: key, id: id})
	if err != nil {
		return "", fmt.Errorf("ledger: read %q: %w", name(channel, key, id), err)
	}
	switch {
	case s == "delivered" || s == "claimed" || s == "none":
		return s, nil
	case strings.HasPrefix(s, "deadlettered:"):
		return "dead-lettered:" + s[len("deadlettered:"):], nil
	}
	return "", fmt.Errorf("ledger: read %q: unexpected reply %q", name(channel, key, id), s)
}

// Unsettled reports, for each id of ids of channel in order (keys[i] the
// pacing key of ids[i]), whether the ledger holds it claimed or
// dead-lettered: an id whose send's outcome may be unknown
// ([Ledger.Outcome] tells which). It reads them as [Ledger.Lookup] does,
// pipelined, writing nothing: what a batch of webhook events is first
// checked with, so that only those few are read one by one. Errors are
// Lookup's; an id whose read failed reads true.
func (l *Ledger) Unsettled(ctx context.Context, channel string, keys, ids []string) ([]bool, error) {
	if len(keys) != len(ids) {
		return nil, fmt.Errorf("ledger: %d pacing keys for %d ids", len(keys), len(ids))
	}
	refs := make([]Ref, len(ids))
	for i := range ids {
		refs[i] = Ref{Channel: channel, Key: keys[i], ID: ids[i]}
	}
	st, err := l.Lookup(ctx, refs)
	out := make([]bool, len(refs))
	for i, s := range st {
		out[i] = s == StateClaimed || s == StateDeadLettered || s == StateUnknown
	}
	return out, err
}
