// Command pacer paces campaign messages from Kafka to rate-limited
// providers. Subcommands:
//
//	pacer run --channel whatsapp         the daemon, configured by PACER_* variables
//	pacer publish --channel whatsapp F   a JSONL campaign file (or -) to Kafka
//	pacer ingest                         the HTTP API for tenants (PACER_INGEST_* variables)
//	pacer status --channel whatsapp      per-key rate, limit, tokens, cooldown, breaker
//	pacer dlq replay --channel whatsapp  put DLQ records back on the main topic
//	pacer limit set|get|unset            per-key limits at run time
//	pacer campaign pause|resume|cancel   campaign control at run time; status: its progress
//	pacer message show --channel C --id  one message's state, attempts and webhook events
//	pacer demo                           the whole flow in-process, no servers
//	pacer fake-provider --channel C      a channel's fake provider API, for tests
//
// Exit status: 0 success, 1 failure, 2 bad usage or configuration.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"regexp"
	"runtime"
	"runtime/debug"
	"slices"
	"strings"
	"syscall"
	"time"
)

const usage = `usage: pacer <command> [flags]

commands:
  run            consume a channel's topic and pace its sends (configured by PACER_* variables)
  publish        publish a JSONL campaign file to a channel's topic
  ingest         serve the HTTP ingest API for tenants (configured by PACER_* variables)
  status         per-key rate, limit, tokens, cooldown and breaker from Redis
  dlq replay     put dead-lettered records back on the main topic
  limit          set, get or unset a pacing key's limit at run time (set|get|unset)
  campaign       pause, resume or cancel a campaign at run time, or show its status
  suppress       list, add, remove, import or export a pacing key's suppressed recipients
  portfolio      put a WhatsApp key in a business portfolio, or show its messaging-limit guard (set|status)
  webhook        hear the providers' status webhooks and apply them (suppressions)
  message        show one message: its state, attempts, provider message id and webhook events
  demo           run the whole flow in-process: embedded Kafka, Redis and a fake provider
  fake-provider  serve a channel's fake provider API, for tests
  version        print the version of this binary

Run "pacer <command> -h" for the flags of a command.
`

// usageError is bad usage: exit status 2.
type usageError struct{ msg string }

func (e *usageError) Error() string { return e.msg }

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if errs := misspelledSettings(os.Environ()); len(errs) > 0 {
		for _, err := range errs {
			fmt.Fprintf(os.Stderr, "pacer: %v\n", err)
		}
		os.Exit(2)
	}
	os.Exit(run(ctx, os.Args[1:], os.Stdin, os.Stdout, os.Stderr, os.LookupEnv))
}

func run(ctx context.Context, args []string, stdin io.Reader, stdout, stderr io.Writer, lookup func(string) (string, bool)) int {
	if len(args) == 0 {
		fmt.Fprint(stderr, usage)
		return 2
	}
	var err error
	switch args[0] {
	case "run":
		err = cmdRun(ctx, args[1:], stdout, stderr, lookup)
	case "publish":
		err = cmdPublish(ctx, args[1:], stdin, stdout, stderr, lookup)
	case "ingest":
		err = cmdIngest(ctx, args[1:], stdout, stderr, lookup)
	case "demo":
		err = cmdDemo(ctx, args[1:], stdout, stderr)
	case "status":
		err = cmdStatus(ctx, args[1:], stdout, stderr, lookup)
	case "limit":
		err = cmdLimit(ctx, args[1:], stdout, stderr, lookup)
	case "campaign":
		err = cmdCampaign(ctx, args[1:], stdout, stderr, lookup)
	case "dlq":
		err = cmdDLQ(ctx, args[1:], stdout, stderr, lookup)
	case "webhook":
		err = cmdWebhook(ctx, args[1:], stdout, stderr, lookup)
	case "suppress":
		err = cmdSuppress(ctx, args[1:], stdin, stdout, stderr, lookup)
	case "portfolio":
		err = cmdPortfolio(ctx, args[1:], stdout, stderr, lookup)
	case "message":
		err = cmdMessage(ctx, args[1:], stdout, stderr, lookup)
	case "fake-provider":
		err = cmdFakeProvider(ctx, args[1:], stdout, stderr)
	case "version", "--version":
		fmt.Fprintln(stdout, versionString())
		return 0
	case "-h", "--help", "help":
		fmt.Fprint(stdout, usage)
		return 0
	default:
		fmt.Fprintf(stderr, "pacer: unknown command %q\n\n%s", args[0], usage)
		return 2
	}
	if err == nil || errors.Is(err, errHelp) {
		return 0
	}
	// Errors of the packages under pacer/ already say "pacer: "; say it once.
	if msg := err.Error(); strings.HasPrefix(msg, "pacer: ") {
		fmt.Fprintln(stderr, msg)
	} else {
		fmt.Fprintln(stderr, "pacer:", msg)
	}
	var ue *usageError
	var ce *configError
	if errors.As(err, &ue) || errors.As(err, &ce) || errors.Is(err, errConfig) {
		return 2
	}
	return 1
}

// verbHelp prints the help of a command made of subcommands (limit,
// campaign, dlq) when args asks for it ("-h", "--help", "help"): its usage
// lines, then each subcommand (name, meaning) on a line of its own. It
// returns errHelp (exit status 0) if it printed, else nil.
func verbHelp(args []string, stdout io.Writer, cmd, usage string, verbs [][2]string) error {
	if len(args) == 0 || (args[0] != "-h" && args[0] != "-help" && args[0] != "--help" && args[0] != "help") {
		return nil
	}
	fmt.Fprintf(stdout, "%s\n\nsubcommands:\n", usage)
	for _, v := range verbs {
		fmt.Fprintf(stdout, "  %-7s %s\n", v[0], v[1])
	}
	fmt.Fprintf(stdout, "\nRun \"pacer %s <subcommand> -h\" for its flags.\n", cmd)
	return errHelp
}

// verbCommand starts command cmd ("limit"), whose first argument is one
// of verbs (name, one-line description): -h prints the usage and the verbs
// (errHelp); a missing or unknown verb is a usage error. It returns the
// verb and its flag set, "pacer <cmd> <verb>" with --channel.
func verbCommand(args []string, stdout, stderr io.Writer, cmd, usage string, verbs [][2]string) (string, *flag.FlagSet, *string, error) {
	if err := verbHelp(args, stdout, cmd, usage, verbs); err != nil {
		return "", nil, nil, err
	}
	if len(args) == 0 || !slices.ContainsFunc(verbs, func(v [2]string) bool { return v[0] == args[0] }) {
		return "", nil, nil, &usageError{usage}
	}
	fs, channel := commandFlags("pacer "+cmd+" "+args[0], "channel", stderr)
	return args[0], fs, channel, nil
}

// errHelp is -h on a subcommand: its usage was printed; exit status 0.
var errHelp = errors.New("help requested")

// commandFlags returns the flag set of command name ("pacer status"), its
// usage and errors written to stderr, with the command's required
// --channel flag, whose -h line starts with what.
func commandFlags(name, what string, stderr io.Writer) (*flag.FlagSet, *string) {
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	fs.SetOutput(stderr)
	return fs, fs.String("channel", "", what+": "+channelList()+" (required)")
}

// parseNoFlags parses args of `pacer <command>`, a command configured by
// environment variables only: -h prints its usage and settingsHelp(); any
// flag or argument is an error.
func parseNoFlags(command string, settingsHelp func() string, args []string, stderr io.Writer) error {
	fs := flag.NewFlagSet("pacer "+command, flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() {
		fmt.Fprintf(stderr, "usage: pacer %s (no flags; configured by environment variables)\n", command)
		fmt.Fprint(stderr, settingsHelp())
	}
	return parseFlags(fs, args)
}

// parseChannelFlags parses args into fs as parseFlags does and returns the
// channel that fs's --channel flag, name, names (a usage error when it
// names none or no channel of Pacer's).
func parseChannelFlags(fs *flag.FlagSet, args []string, name *string) (*channel, error) {
	if err := parseFlags(fs, args); err != nil {
		return nil, err
	}
	return channelNamed(*name)
}

// parseFlags parses args into fs, flags before and after positional
// arguments alike (pacer publish f.jsonl --channel whatsapp), and refuses
// positional arguments unless fs is publish's (which takes FILE). "--" ends
// the flags. A text flag given as "" is refused (see below). The
// positional arguments are left in fs.Args().
func parseFlags(fs *flag.FlagSet, args []string) error {
	var pos []string
	for {
		if err := parseQuiet(fs, args); err != nil {
			if errors.Is(err, flag.ErrHelp) {
				fs.Usage()
				return errHelp
			}
			return flagError(fs, args, err)
		}
		rest := fs.Args()
		if len(rest) == 0 {
			break
		}
		if len(args) > len(rest) && args[len(args)-len(rest)-1] == "--" {
			pos = append(pos, rest...) // after "--": all positional
			break
		}
		pos = append(pos, rest[0])
		args = rest[1:]
	}
	// A text flag given but empty ("--topic ''", often an unset shell
	// variable) is refused rather than read as its default, which for
	// --topic and --group is the production one.
	var empty []string
	fs.Visit(func(f *flag.Flag) {
		if f.DefValue == "" && f.Value.String() == "" {
			empty = append(empty, "--"+f.Name)
		}
	})
	if len(empty) > 0 {
		return &usageError{fmt.Sprintf("%s: %s given but empty: give a value (an optional flag may be left out for its default)", strings.TrimPrefix(fs.Name(), "pacer "), strings.Join(empty, ", "))}
	}
	if fs.Name() != "pacer publish" && len(pos) > 0 {
		return &usageError{fmt.Sprintf("%s: unexpected argument %q", strings.TrimPrefix(fs.Name(), "pacer "), pos[0])}
	}
	// Leave the positional arguments where fs.Arg and fs.NArg find them.
	if err := fs.Parse(append([]string{"--"}, pos...)); err != nil {
		return &usageError{err.Error()}
	}
	return nil
}

// flagErrorRE matches the flag package's errors: an undefined flag, a
// flag without its value, and a value Set refused (bool flags say so).
var flagErrorRE = regexp.MustCompile(`^(?:flag provided but not defined: -(.+)|flag needs an argument: -(.+)|invalid (?:boolean )?value "(.*)" for (?:flag )?-([^:]+): (.*))$`)

// flagError is a parse error of fs in pacer's words, on one line: the
// flag as args spelled it (- or --), what is wrong with it, and the
// command whose -h lists the flags. The usage is not printed: a command's
// flags can run to 60 lines, above the error that matters.
func flagError(fs *flag.FlagSet, args []string, err error) error {
	cmd := strings.TrimPrefix(fs.Name(), "pacer ")
	hint := fmt.Sprintf("; %q lists the flags", fs.Name()+" -h")
	m := flagErrorRE.FindStringSubmatch(err.Error())
	if m == nil {
		return &usageError{cmd + ": " + err.Error() + hint}
	}
	spelled := func(name string) string {
		for _, a := range args {
			if a == "-"+name || strings.HasPrefix(a, "-"+name+"=") {
				return "-" + name
			}
		}
		return "--" + name
	}
	switch {
	case m[1] != "":
		return &usageError{cmd + ": unknown flag " + spelled(m[1]) + hint}
	case m[2] != "":
		return &usageError{cmd + ": " + spelled(m[2]) + " needs a value" + hint}
	}
	why := m[5]
	if f := fs.Lookup(m[4]); f != nil && (why == "parse error" || why == "value out of range") {
		if g, ok := f.Value.(flag.Getter); ok {
			switch g.Get().(type) {
			case float64:
				why = "not a number"
			case int, int64, uint, uint64:
				why = "not a whole number"
			case time.Duration:
				why = "not a duration (such as 10s or 1m)"
			case bool:
				why = "not true or false"
			}
			if m[5] == "value out of range" {
				why = "out of range"
			}
		}
	}
	return &usageError{fmt.Sprintf("%s: %s %q: %s%s", cmd, spelled(m[4]), m[3], why, hint)}
}

// parseQuiet is fs.Parse(args) without the flag package's own output: on
// an error it would print the error, then the usage, and the caller prints
// the error again as pacer's last line. Callers print the usage themselves.
func parseQuiet(fs *flag.FlagSet, args []string) error {
	usage, out := fs.Usage, fs.Output()
	if usage == nil {
		usage = func() {
			fmt.Fprintf(fs.Output(), "Usage of %s:\n", fs.Name())
			fs.PrintDefaults()
		}
	}
	fs.Usage = func() {}
	fs.SetOutput(io.Discard)
	defer func() { fs.Usage = usage; fs.SetOutput(out) }()
	return fs.Parse(args)
}

// version is the release this binary was built from, set by the Makefile
// (-ldflags "-X main.version=..."); empty in a plain go build, where the
// module's build information is used.
var version string

// versionString says which build this is: version (or the module version
// and VCS revision Go recorded), and the Go toolchain.
func versionString() string {
	v := version
	if bi, ok := debug.ReadBuildInfo(); ok {
		if v == "" {
			v = bi.Main.Version
			for _, s := range bi.Settings {
				if s.Key == "vcs.revision" && len(s.Value) >= 12 {
					v += " " + s.Value[:12]
				}
			}
		}
	}
	if v == "" {
		v = "(devel)"
	}
	return "pacer " + v + " " + runtime.Version()
}

// errConfig marks configuration errors (exit status 2).
var errConfig = errors.New("invalid configuration")
