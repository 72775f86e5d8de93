package ledger

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"
	"unicode"

	"github.com/redis/go-redis/v9"
)

// HistoryAttempts is how many attempts of an id the ledger keeps: the
// newest, each generation's field holding at most this many
// (ledger.lua's keep_attempts).
const HistoryAttempts = 5

// maxCodeBytes bounds an attempt's code as the ledger stores it.
const maxCodeBytes = 64

// Attempt is one request of a message to its provider, as the ledger
// keeps it beside the id's entry ([Batcher.Attempted]): At (Redis TIME,
// ms) when it was written, Outcome what Pacer did with the answer (e.g.
// "delivered", "retry", "dead-lettered"; one word) and Code the
// provider's code or HTTP status ("" none).
type Attempt struct {
	At      time.Time
	Outcome string
	Code    string
}

// arg is a's operation argument in ledger.lua: "<outcome> <code>", the
// code "-" when empty, any space or control character in it replaced by
// "_" and cut to 64 bytes.
func (a Attempt) arg() (string, error) {
	if a.Outcome == "" || strings.IndexFunc(a.Outcome, func(r rune) bool { return unicode.IsSpace(r) || unicode.IsControl(r) }) >= 0 {
		return "", fmt.Errorf("ledger: attempt outcome %q must be one word", a.Outcome)
	}
	code := strings.Map(func(r rune) rune {
		if unicode.IsSpace(r) || unicode.IsControl(r) {
			return '_'
		}
		return r
	}, a.Code)
	if len(code) > maxCodeBytes {
		code = code[:maxCodeBytes]
	}
	if code == "" {
		code = "-"
	}
	return a.Outcome + " " + code, nil
}

// parseAttempt reads one attempt line, "<ms> <outcome> <code>".
func parseAttempt(line string) (Attempt, bool) {
	f := strings.SplitN(line, " ", 3)
	if len(f) != 3 {
		return Attempt{}, false
	}
	ms, err := strconv.ParseInt(f[0], 10, 64)
	if err != nil {
		return Attempt{}, false
	}
	a := Attempt{At: time.UnixMilli(ms), Outcome: f[1], Code: f[2]}
	if a.Code == "-" {
		a.Code = ""
	}
	return a, true
}

// Attempted queues a, an attempt of id that ended (delivered, refused,
// unanswered), for the next flush: its ledger.lua call appends it to the
// id's attempts (the newest [HistoryAttempts] kept), so queued with the
// mark or release the outcome writes anyway it costs no round trip of its
// own. It returns nil, or an error naming a malformed a. After Close it
// writes at once.
func (b *Batcher) Attempted(ctx context.Context, channel, key, id string, a Attempt) error {
	arg, err := a.arg()
	if err != nil {
		return err
	}
	m := mark{kind: 'a', channel: channel, key: key, id: id, arg: arg}
	return b.queue(ctx, m, nil, func() error {
		if _, err := b.l.run(ctx, m); err != nil {
			return fmt.Errorf("ledger: attempt of %q: %w", name(channel, key, id), err)
		}
		return nil
	})
}

// Entry is what the ledger holds for an id ([Ledger.Show]): its State and
// the value that decides it (Owner while claimed, ProviderID once
// delivered, Reason once dead-lettered), and its attempts, oldest first
// (the newest [HistoryAttempts]).
type Entry struct {
	State      State
	Owner      string
	ProviderID string
	Reason     string
	Attempts   []Attempt
}

// Known reports whether the ledger holds anything of the id: an entry or
// an attempt.
func (e Entry) Known() bool { return e.State != StateNone || len(e.Attempts) > 0 }

// Show reads what the ledger holds for id of channel and key, writing
// nothing: one script call. An id it holds nothing of (never seen, or
// older than the TTL) reads [StateNone] with no attempts. Errors wrap the
// Redis error.
func (l *Ledger) Show(ctx context.Context, channel, key, id string) (Entry, error) {
	s, err := l.run(ctx, op{kind: 'h', channel: channel, key: key, id: id})
	if err != nil {
		return Entry{}, fmt.Errorf("ledger: show %q: %w", name(channel, key, id), err)
	}
	return parseEntry(s), nil
}

// Show reads what the ledger holds for id as [Ledger.Show] does, in a
// call of its own: marks still waiting for their flush are not seen.
func (b *Batcher) Show(ctx context.Context, channel, key, id string) (Entry, error) {
	return b.l.Show(ctx, channel, key, id)
}

// parseEntry reads ledger.lua's reply to a read of attempts ("h").
func parseEntry(s string) Entry {
	lines := strings.Split(s, "\n")
	e := Entry{State: StateNone}
	switch v := lines[0]; {
	case strings.HasPrefix(v, "d:"):
		e.State, e.ProviderID = StateDelivered, v[2:]
	case strings.HasPrefix(v, "x:"):
		e.State, e.Reason = StateDeadLettered, v[2:]
	case strings.HasPrefix(v, "c:"):
		e.State, e.Owner = StateClaimed, v[2:]
	}
	for _, line := range lines[1:] {
		if a, ok := parseAttempt(line); ok {
			e.Attempts = append(e.Attempts, a)
		}
	}
	if n := len(e.Attempts); n > HistoryAttempts {
		e.Attempts = e.Attempts[n-HistoryAttempts:]
	}
	return e
}

// ErrKeyNeeded is [Ledger.KeysOf]'s error under Redis Cluster, whose
// ledger hashes are per pacing key: the key must be given.
var ErrKeyNeeded = errors.New("ledger: under Redis Cluster the pacing key of an id must be given")

// KeysOf returns the pacing keys the ledger holds id under in channel
// (usually one; none when it holds nothing of id), reading the channel's
// generation hashes with HSCAN: a command for an operator, not the
// message path. Under Redis Cluster it returns [ErrKeyNeeded].
func (l *Ledger) KeysOf(ctx context.Context, channel, id string) ([]string, error) {
	if l.cluster {
		return nil, ErrKeyNeeded
	}
	suffix := "\n" + id
	match := "*" + globEscape(suffix)
	seen := map[string]bool{}
	var keys []string
	g := time.Now().UnixMilli() / l.genMs
	for gen := g - generations - 1; gen <= g+1; gen++ {
		iter := l.rdb.HScan(ctx, l.keys.ChannelIDs(channel, gen), 0, match, 1000).Iterator()
		for i := 0; iter.Next(ctx); i++ {
			if i%2 == 1 {
				continue // a value
			}
			f := iter.Val()
			if k, ok := strings.CutSuffix(f, suffix); ok && !strings.Contains(k, "\n") && !seen[k] {
				seen[k] = true
				keys = append(keys, k)
			}
		}
		if err := iter.Err(); err != nil && !errors.Is(err, redis.Nil) {
			return nil, fmt.Errorf("ledger: find the key of %q in %s: %w", id, channel, err)
		}
	}
	return keys, nil
}

// globEscape escapes s for a Redis MATCH pattern.
func globEscape(s string) string {
	var b strings.Builder
	for _, r := range s {
		switch r {
		case '*', '?', '[', ']', '\\':
			b.WriteByte('\\')
		}
		b.WriteRune(r)
	}
	return b.String()
}
