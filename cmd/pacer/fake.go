package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"math"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"time"

	"github.com/pacerhq/pacer/internal/answertime"
)

// fakeServer is a channel's fake provider as `pacer fake-provider` serves
// it: a row's fake defines the fake's flags on a flag set and returns a
// function that builds it once they are parsed.
type fakeServer struct {
	handler http.Handler
	// settings returns the variables that point `pacer run` at the fake
	// served at baseURL, in order, writing the files they name into dir.
	settings func(baseURL, dir string) ([][2]string, error)
}

const fakeUsage = `usage: pacer fake-provider --channel C [--addr A] [--dir D] [flags of C]
       (pacer fake-provider C [flags] is the same)
Serves the fake provider API of channel C (%s) until
interrupted. It prints its URL and, on the line after, the settings that
point "pacer run --channel C" at it (NAME=value, separated by spaces).
Its limits are strict token buckets counted at its ingress, each full at its
key's first request, with no burst beyond the flags'. Each answer comes
--answer-time after its request was counted (default at once). It speaks
HTTP/1.1 and cleartext HTTP/2 (h2c). GET /_stats returns
what each key sent; POST /_admin/rate?key=K&rate=R sets a hidden rate while
it runs (key empty: every key). The whatsapp fake also takes
POST /_admin/fail?key=K&n=N: the next N requests of K get HTTP 500, counted
as failed, not throttled, in /_stats.
`

// cmdFakeProvider serves a channel's fake provider: `pacer fake-provider
// --channel C`.
func cmdFakeProvider(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	name, rest := fakeChannelArg(args)
	if name == "" && len(rest) > 0 && (rest[0] == "-h" || rest[0] == "-help" || rest[0] == "--help") {
		fmt.Fprintf(stderr, fakeUsage, channelList())
		fs := flag.NewFlagSet("pacer fake-provider", flag.ContinueOnError)
		fs.SetOutput(stderr)
		fakeCommonFlags(fs)
		fmt.Fprintln(stderr, "\nflags of every channel:")
		fs.PrintDefaults()
		for _, ch := range channelTable {
			fmt.Fprintf(stderr, "\nflags of --channel %s:\n", ch.name)
			fs := flag.NewFlagSet("pacer fake-provider", flag.ContinueOnError)
			fs.SetOutput(stderr)
			ch.fake(fs)
			fs.PrintDefaults()
		}
		return errHelp
	}
	ch, err := channelNamed(name)
	if err != nil {
		return &usageError{"fake-provider: " + err.Error() + `; "pacer fake-provider -h" lists the flags`}
	}
	fs := flag.NewFlagSet("pacer fake-provider", flag.ContinueOnError)
	fs.SetOutput(stderr)
	addr, dir := fakeCommonFlags(fs)
	build := ch.fake(fs)
	fs.Usage = func() {
		fmt.Fprintf(stderr, fakeUsage, channelList())
		fmt.Fprintf(stderr, "\nflags of --channel %s (and of every channel):\n", ch.name)
		fs.PrintDefaults()
	}
	if err := parseFlags(fs, rest); err != nil {
		return err
	}
	if c := fs.Lookup("channel").Value.String(); c != "" && c != ch.name {
		return &usageError{fmt.Sprintf("fake-provider: channel %s and --channel %s: give one", ch.name, c)}
	}
	if err := checkFakeLimits(fs); err != nil {
		return err
	}
	// A given --dir must exist: a mistyped path would be created and left
	// holding credential files after the fake stops.
	if *dir != "" {
		if st, err := os.Stat(*dir); errors.Is(err, os.ErrNotExist) {
			return &usageError{fmt.Sprintf("fake-provider: --dir %s: does not exist; create it, or leave --dir out for a temporary one removed on exit", *dir)}
		} else if err == nil && !st.IsDir() {
			return &usageError{fmt.Sprintf("fake-provider: --dir %s: is not a directory", *dir)}
		}
	}
	fake, err := build()
	if err != nil {
		return err
	}
	ln, err := net.Listen("tcp", *addr)
	if err != nil {
		return err
	}
	// HTTP/1.1 and cleartext HTTP/2 (h2c, with prior knowledge): the
	// adapters speak HTTP/2 to an http:// base URL that takes it.
	srv := &http.Server{Handler: fake.handler, ReadHeaderTimeout: 5 * time.Second}
	srv.Protocols = new(http.Protocols)
	srv.Protocols.SetHTTP1(true)
	srv.Protocols.SetUnencryptedHTTP2(true)
	if *dir == "" {
		if *dir, err = os.MkdirTemp("", "pacer-fake-"+ch.name+"-"); err != nil {
			ln.Close()
			return err
		}
		defer os.RemoveAll(*dir)
	}
	base := "http://" + dialable(ln.Addr().(*net.TCPAddr))
	settings, err := fake.settings(base, *dir)
	if err != nil {
		ln.Close()
		return fmt.Errorf("fake-provider: %w", err)
	}
	words := make([]string, len(settings))
	for i, s := range settings {
		words[i] = s[0] + "=" + shellQuote(s[1])
	}
	fmt.Fprintf(stdout, "fake %[1]s listening on %[2]s (GET /_stats, POST /_admin/rate)\n"+
		"point \"pacer run --channel %[1]s\" at it with these settings:\n%[3]s\n", ch.name, base, strings.Join(words, " "))
	go func() {
		<-ctx.Done()
		sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		srv.Shutdown(sctx)
	}()
	if err := srv.Serve(ln); err != http.ErrServerClosed {
		return err
	}
	return nil
}

// fakeCommonFlags defines the flags of every channel's fake on fs.
func fakeCommonFlags(fs *flag.FlagSet) (addr, dir *string) {
	fs.String("channel", "", "the channel whose provider to fake: "+channelList())
	addr = fs.String("addr", "127.0.0.1:0", "listen address")
	dir = fs.String("dir", "", "existing directory for the credential files whose paths the fake prints, which stay there (default: a new temporary one, removed on exit)")
	fs.String("answer-time", "0s", "how long each answer takes after the request was counted: a duration (300ms), a uniform range (250ms-350ms) or lognormal:MEDIAN,p99=P99 (lognormal:300ms,p99=2s); requests wait side by side")
	return addr, dir
}

// fakeAnswerTime returns the --answer-time of fs, defined by
// fakeCommonFlags and checked by checkFakeLimits.
func fakeAnswerTime(fs *flag.FlagSet) answertime.Dist {
	d, _ := answertime.Parse(fs.Lookup("answer-time").Value.String())
	return d
}

// fakeChannelArg returns the channel args name, as their first argument
// or the value of --channel, and the arguments without a leading channel
// name.
func fakeChannelArg(args []string) (string, []string) {
	if len(args) > 0 && !strings.HasPrefix(args[0], "-") {
		return args[0], args[1:]
	}
	for i, a := range args {
		switch {
		case (a == "--channel" || a == "-channel") && i+1 < len(args):
			return args[i+1], args
		case strings.HasPrefix(a, "--channel="), strings.HasPrefix(a, "-channel="):
			return a[strings.Index(a, "=")+1:], args
		}
	}
	return "", args
}

// checkFakeLimits refuses a numeric flag that is negative or not finite,
// a duration that is not positive, or an --answer-time that does not
// parse, naming the flag: every number of a
// fake is a limit, and such a value would make the fake more lenient than
// the provider it stands for, or meaningless.
func checkFakeLimits(fs *flag.FlagSet) error {
	var bad []string
	fs.VisitAll(func(f *flag.Flag) {
		if f.Name == "answer-time" {
			if _, err := answertime.Parse(f.Value.String()); err != nil {
				bad = append(bad, "--answer-time "+err.Error())
			}
			return
		}
		g, ok := f.Value.(flag.Getter)
		if !ok {
			return
		}
		switch v := g.Get().(type) {
		case float64:
			if !(v >= 0) || math.IsInf(v, 0) {
				bad = append(bad, fmt.Sprintf("--%s %v: must be a finite number >= 0", f.Name, v))
			}
		case int:
			if v < 0 {
				bad = append(bad, fmt.Sprintf("--%s %v: must be >= 0", f.Name, v))
			}
		case time.Duration:
			if v <= 0 {
				bad = append(bad, fmt.Sprintf("--%s %v: must be > 0", f.Name, v))
			}
		}
	})
	if len(bad) > 0 {
		return &usageError{"fake-provider: " + strings.Join(bad, "; ")}
	}
	return nil
}

// dialable returns a's host:port as a client reaches it: 127.0.0.1 for a
// listener on every address (IPv4 and IPv6 alike).
func dialable(a *net.TCPAddr) string {
	ip := a.IP
	if ip == nil || ip.IsUnspecified() {
		ip = net.IPv4(127, 0, 0, 1)
	}
	return net.JoinHostPort(ip.String(), fmt.Sprint(a.Port))
}

// shellQuote returns s as one shell word: as is when it holds only
// characters no shell treats specially, else in single quotes.
func shellQuote(s string) string {
	if regexp.MustCompile(`^[A-Za-z0-9_@%+=:,./-]+$`).MatchString(s) {
		return s
	}
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
}

// writeFakeFile writes a credential file of the fake into dir and returns
// its path.
func writeFakeFile(dir, name string, content []byte) (string, error) {
	path := filepath.Join(dir, name)
	if err := os.WriteFile(path, content, 0o600); err != nil {
		return "", err
	}
	return path, nil
}
