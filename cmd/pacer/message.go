package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/pacerhq/pacer/bucket"
	"github.com/pacerhq/pacer/pacer/ledger"
	"github.com/pacerhq/pacer/pacer/message"
)

const messageUsage = "usage: pacer message show --channel C --id ID [--key K] [--json]"

// errUnknownMessage is `pacer message show` of an id Pacer holds nothing
// of: exit status 1.
var errUnknownMessage = errors.New("unknown id")

// cmdMessage looks up one message by its envelope id (package message):
// its state, attempts, provider message id and webhook events.
func cmdMessage(ctx context.Context, args []string, stdout, stderr io.Writer, lookup func(string) (string, bool)) error {
	_, fs, channel, err := verbCommand(args, stdout, stderr, "message", messageUsage, [][2]string{
		{"show", "one message's state, attempts, provider message id and webhook events"},
	})
	if err != nil {
		return err
	}
	id := fs.String("id", "", "the envelope id (required)")
	key := fs.String("key", "", "its pacing key; default: found in the ledger from the id (required under Redis Cluster)")
	asJSON := fs.Bool("json", false, "print the message as JSON (the ingest API's GET /v1/messages/{id} body)")
	ch, err := parseChannelFlags(fs, args[1:], channel)
	if err != nil {
		return err
	}
	if *id == "" {
		return &usageError{"message show: --id is required"}
	}
	cfg, rdb, err := commandRedis(ctx, lookup, ch, "message show")
	if err != nil {
		return err
	}
	defer rdb.Close()
	keys := bucket.NewKeys(cfg.RedisPrefix)
	led := ledger.New(rdb, keys, cfg.LedgerTTL)
	unknown := fmt.Errorf("message show: %w %s of %s (never seen, or older than the ledger's TTL of %v)", errUnknownMessage, *id, *channel, led.TTL())
	if *key == "" {
		found, err := led.KeysOf(ctx, *channel, *id)
		if errors.Is(err, ledger.ErrKeyNeeded) {
			return &usageError{"message show: --key is required under Redis Cluster"}
		}
		if err != nil {
			return fmt.Errorf("message show: %w", err)
		}
		switch len(found) {
		case 0:
			return unknown
		case 1:
			*key = found[0]
		default:
			return &usageError{fmt.Sprintf("message show: id %s is held under %d pacing keys (%s): give --key", *id, len(found), strings.Join(found, ", "))}
		}
	}
	m, ok, err := message.Lookup(ctx, rdb, keys, led, *channel, *key, *id)
	if err != nil {
		return fmt.Errorf("message show: %w", err)
	}
	if !ok {
		return unknown
	}
	if *asJSON {
		enc := json.NewEncoder(stdout)
		enc.SetIndent("", "  ")
		return enc.Encode(m)
	}
	printMessage(stdout, m)
	return nil
}

// printMessage prints m as text: a line of its state, one per attempt,
// one per event.
func printMessage(w io.Writer, m message.Message) {
	fmt.Fprintf(w, "message %s of %s, key %s: %s", m.ID, m.Channel, m.Key, m.State)
	switch {
	case m.ProviderMessageID != "":
		fmt.Fprintf(w, ", provider message id %s", m.ProviderMessageID)
	case m.Reason != "":
		fmt.Fprintf(w, " (%s)", m.Reason)
	case m.Owner() != "":
		fmt.Fprintf(w, " by %s", m.Owner())
	}
	fmt.Fprintln(w)
	if len(m.Attempts) == 0 {
		if m.State == "delivered" {
			fmt.Fprintln(w, "attempts: delivered at its first request (its mark says so; no line is kept for it)")
		} else {
			fmt.Fprintln(w, "attempts: none recorded")
		}
	} else {
		fmt.Fprintf(w, "attempts (the newest %d kept):\n", ledger.HistoryAttempts)
	}
	for _, a := range m.Attempts {
		code := a.Code
		if code == "" {
			code = "-"
		}
		fmt.Fprintf(w, "  %s  %-13s %s\n", a.At.Format(time.RFC3339Nano), a.Outcome, code)
	}
	if len(m.Events) == 0 {
		fmt.Fprintln(w, "events: none received")
		return
	}
	fmt.Fprintln(w, "events:")
	for _, e := range m.Events {
		at := "time not recorded"
		if e.At != nil {
			at = e.At.Format(time.RFC3339Nano)
		}
		fmt.Fprintf(w, "  %s  %s\n", at, e.Kind)
	}
}
