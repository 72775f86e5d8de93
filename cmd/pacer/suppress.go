package main

// pacer suppress: the recipients a pacing key does not send to (see
// pacer/suppress), listed, added, removed, imported and exported as CSV.

import (
	"bufio"
	"context"
	"encoding/csv"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/pacerhq/pacer/bucket"
	"github.com/pacerhq/pacer/pacer/suppress"
)

const suppressUsage = `usage: pacer suppress list   --channel C --key K
       pacer suppress add    --channel C --key K --recipient R [--reason manual] [--expires E]
       pacer suppress remove --channel C --key K --recipient R
       pacer suppress import --channel C --key K [--file F.csv]
       pacer suppress export --channel C --key K

CSV (import and export): recipient,reason,expires[,seen]; a first line
"recipient,..." is a header. recipient: the address or token, or
hash:<24 hex digits> as export writes it (only hashes are stored); reason:
one of ` + "unregistered, undeliverable, marketing-limit, bounce, dropped, spamreport, unsubscribe, manual" + ` (empty:
manual); expires: empty (the reason's default: 7 days for undeliverable, 24 h
for marketing-limit, else never), never, a duration (72h) or an RFC 3339 time;
seen: when the provider saw it (RFC 3339), may be left out.`

// importBatch is how many rows go to Redis together: one pipeline of
// script calls of 1,000 entries each.
const importBatch = 10_000

// cmdSuppress lists, adds, removes, imports and exports the suppressed
// recipients of a pacing key.
func cmdSuppress(ctx context.Context, args []string, stdin io.Reader, stdout, stderr io.Writer, lookup func(string) (string, bool)) error {
	verb, fs, channel, err := verbCommand(args, stdout, stderr, "suppress", suppressUsage, [][2]string{
		{"list", "show a pacing key's suppressed recipients (by hash) with reason and expiry"},
		{"add", "suppress one recipient for a pacing key"},
		{"remove", "end one recipient's suppression"},
		{"import", "add the suppressions of a CSV file (stdin by default); bad lines are reported and skipped"},
		{"export", "write a pacing key's suppressions as CSV to stdout"},
	})
	if err != nil {
		return err
	}
	key := fs.String("key", "", "pacing key: the sender whose recipients these are (APNs bundle ID, FCM project ID, WhatsApp phone-number ID, SendGrid API key name) (required)")
	recipient, reason, expires, file := new(string), new(string), new(string), new(string)
	switch verb {
	case "add", "remove":
		fs.StringVar(recipient, "recipient", "", "the address or device token, or hash:<24 hex digits> (required)")
	case "import":
		fs.StringVar(file, "file", "-", "CSV file to read; - is stdin")
	}
	if verb == "add" {
		fs.StringVar(reason, "reason", string(suppress.Manual), "why: unregistered, undeliverable, marketing-limit, bounce, dropped, spamreport, unsubscribe or manual")
		fs.StringVar(expires, "expires", "", "when it ends: never, a duration (72h) or an RFC 3339 time; default the reason's (7 days for undeliverable, 24 h for marketing-limit, else never)")
	}
	ch, err := parseChannelFlags(fs, args[1:], channel)
	if err != nil {
		return err
	}
	if strings.TrimSpace(*key) == "" {
		return &usageError{"suppress " + verb + ": --key is required"}
	}
	now := time.Now()
	var entry suppress.Entry
	switch verb {
	case "add", "remove":
		if *recipient == "" {
			return &usageError{"suppress " + verb + ": --recipient is required"}
		}
		h, err := suppress.RecipientHash(*recipient)
		if err != nil {
			return &usageError{"suppress " + verb + ": --recipient: " + strings.TrimPrefix(err.Error(), "suppress: ")}
		}
		entry.Hash = h
		if verb == "add" {
			if entry, err = parseRow(h, *reason, *expires, "", now); err != nil {
				return &usageError{"suppress add: " + err.Error()}
			}
		}
	}
	cfg, rdb, err := commandRedis(ctx, lookup, ch, "suppress "+verb)
	if err != nil {
		return err
	}
	defer rdb.Close()
	st := suppress.NewStore(rdb, bucket.NewKeys(cfg.RedisPrefix))
	name := *channel + " " + quoteText(*key)
	switch verb {
	case "add":
		n, err := st.Add(ctx, *channel, *key, entry)
		if err != nil {
			return fmt.Errorf("suppress add: %w", err)
		}
		was := "new"
		if n == 0 {
			was = "replacing its entry"
		}
		fmt.Fprintf(stdout, "%s: %s%s suppressed (%s, %s, %s)\n", name, suppress.HashPrefix, entry.Hash, entry.Reason, showExpiry(entry.Expires), was)
	case "remove":
		n, err := st.Remove(ctx, *channel, *key, entry.Hash)
		if err != nil {
			return fmt.Errorf("suppress remove: %w", err)
		}
		if n == 0 {
			fmt.Fprintf(stdout, "%s: %s%s was not suppressed\n", name, suppress.HashPrefix, entry.Hash)
		} else {
			fmt.Fprintf(stdout, "%s: %s%s no longer suppressed\n", name, suppress.HashPrefix, entry.Hash)
		}
	case "list":
		tw := tabwriter.NewWriter(stdout, 0, 4, 2, ' ', 0)
		fmt.Fprintln(tw, "RECIPIENT\tREASON\tEXPIRES\tSEEN")
		n := 0
		err := st.List(ctx, *channel, *key, now, func(e suppress.Entry) error {
			n++
			_, err := fmt.Fprintf(tw, "%s%s\t%s\t%s\t%s\n", suppress.HashPrefix, e.Hash, e.Reason, showExpiry(e.Expires), showTime(e.At))
			return err
		})
		if err != nil {
			return fmt.Errorf("suppress list: %w", err)
		}
		tw.Flush()
		fmt.Fprintf(stdout, "%d suppressed for %s\n", n, name)
	case "export":
		w := csv.NewWriter(stdout)
		_ = w.Write([]string{"recipient", "reason", "expires", "seen"})
		err := st.List(ctx, *channel, *key, now, func(e suppress.Entry) error {
			exp := "never"
			if !e.Expires.IsZero() {
				exp = e.Expires.UTC().Format(time.RFC3339Nano)
			}
			seen := ""
			if !e.At.IsZero() {
				seen = e.At.UTC().Format(time.RFC3339Nano)
			}
			return w.Write([]string{suppress.HashPrefix + e.Hash, string(e.Reason), exp, seen})
		})
		w.Flush()
		if err == nil {
			err = w.Error()
		}
		if err != nil {
			return fmt.Errorf("suppress export: %w", err)
		}
	case "import":
		in := stdin
		if *file != "-" {
			f, err := os.Open(*file)
			if err != nil {
				return fmt.Errorf("suppress import: --file %s: %s", quoteText(*file), pathError(err))
			}
			defer f.Close()
			in = f
		}
		return importCSV(ctx, st, *channel, *key, in, stdout, stderr, now)
	}
	return nil
}

// importCSV adds the rows of in to key's suppressions, importBatch at a
// time. A bad line is reported on stderr with its line number and skipped;
// the others are imported, and the error then counts the bad lines (exit
// status 1).
func importCSV(ctx context.Context, st *suppress.Store, channel, key string, in io.Reader, stdout, stderr io.Writer, now time.Time) error {
	br := bufio.NewReaderSize(in, 1<<16)
	if bom, _ := br.Peek(3); string(bom) == "\xef\xbb\xbf" {
		br.Discard(3) // a UTF-8 byte order mark, as spreadsheets write it
	}
	r := csv.NewReader(br)
	r.FieldsPerRecord = -1
	r.ReuseRecord = true
	var batch []suppress.Entry
	rows, added, bad := 0, 0, 0
	flush := func() error {
		if len(batch) == 0 {
			return nil
		}
		n, err := st.Add(ctx, channel, key, batch...)
		if err != nil {
			return fmt.Errorf("suppress import: after %d rows: %w", rows-len(batch), err)
		}
		added += n
		batch = batch[:0]
		return nil
	}
	for first := true; ; first = false {
		rec, err := r.Read()
		if err == io.EOF {
			break
		}
		var pe *csv.ParseError
		if errors.As(err, &pe) {
			bad++
			fmt.Fprintf(stderr, "line %d: %v\n", pe.StartLine, pe.Err)
			if errors.Is(pe.Err, csv.ErrQuote) {
				fmt.Fprintf(stderr, "line %d: a quote opened there is never closed: the lines after it were read as its field, and skipped with it\n", pe.StartLine)
			}
			continue
		}
		if err != nil {
			return fmt.Errorf("suppress import: after %d rows: %w", rows, err)
		}
		line, _ := r.FieldPos(0)
		if first && len(rec) > 0 && strings.EqualFold(strings.TrimSpace(rec[0]), "recipient") {
			continue // the header
		}
		e, err := parseRecord(rec, now)
		if err != nil {
			bad++
			fmt.Fprintf(stderr, "line %d: %v\n", line, err)
			continue
		}
		rows++
		batch = append(batch, e)
		if len(batch) >= importBatch {
			if err := flush(); err != nil {
				return err
			}
		}
	}
	if err := flush(); err != nil {
		return err
	}
	fmt.Fprintf(stdout, "%s %s: imported %d rows (%d new, %d replaced)\n", channel, quoteText(key), rows, added, rows-added)
	if bad > 0 {
		return fmt.Errorf("suppress import: %d bad lines skipped (listed above); the other %d rows were imported", bad, rows)
	}
	return nil
}

// parseRecord reads one CSV row: recipient,reason,expires[,seen].
func parseRecord(rec []string, now time.Time) (suppress.Entry, error) {
	if len(rec) < 2 || len(rec) > 4 {
		return suppress.Entry{}, fmt.Errorf("%d fields; want recipient,reason,expires[,seen] (comma-separated; expires may be empty)", len(rec))
	}
	field := func(i int) string {
		if i < len(rec) {
			return strings.TrimSpace(rec[i])
		}
		return ""
	}
	h, err := suppress.RecipientHash(field(0))
	if err != nil {
		return suppress.Entry{}, errors.New(strings.TrimPrefix(err.Error(), "suppress: "))
	}
	return parseRow(h, field(1), field(2), field(3), now)
}

// parseRow builds the entry of hash h from the text of its reason (""
// means manual), expiry ("" the reason's default, "never", a duration
// from now or an RFC 3339 time) and seen time ("" none, else RFC 3339).
func parseRow(h, reason, expires, seen string, now time.Time) (suppress.Entry, error) {
	if reason == "" {
		reason = string(suppress.Manual)
	}
	r, err := suppress.ParseReason(reason)
	if err != nil {
		return suppress.Entry{}, errors.New(strings.TrimPrefix(err.Error(), "suppress: "))
	}
	var at time.Time
	if seen != "" {
		if at, err = time.Parse(time.RFC3339Nano, seen); err != nil {
			return suppress.Entry{}, fmt.Errorf("seen %q is not an RFC 3339 time", seen)
		}
	}
	e := suppress.New(h, r, at, now)
	switch {
	case expires == "":
	case expires == "never":
		e.Expires = time.Time{}
	default:
		if d, err := time.ParseDuration(expires); err == nil && d > 0 {
			e.Expires = now.Add(d)
		} else if t, err := time.Parse(time.RFC3339Nano, expires); err == nil {
			e.Expires = t
		} else {
			return suppress.Entry{}, fmt.Errorf("expires %q is not never, a duration > 0 (72h) or an RFC 3339 time", expires)
		}
		if !e.Expires.IsZero() && !e.Expires.After(now) {
			return suppress.Entry{}, fmt.Errorf("expires %q is already past: the entry would suppress nothing", expires)
		}
	}
	return e, nil
}

// showExpiry is an entry's expiry for people: "never" or the UTC time.
func showExpiry(t time.Time) string {
	if t.IsZero() {
		return "never"
	}
	return t.UTC().Format(time.RFC3339)
}

// showTime is t in UTC, "-" for none.
func showTime(t time.Time) string {
	if t.IsZero() {
		return "-"
	}
	return t.UTC().Format(time.RFC3339)
}
