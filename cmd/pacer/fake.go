package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"math"
	"net"
	"net/http"
	"strings"
	"time"

	"github.com/pacerhq/pacer/channels/whatsapp/whatsapptest"
)

func cmdFakeProvider(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("pacer fake-provider", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() {
		fmt.Fprintln(stderr, "usage: pacer fake-provider whatsapp [--addr A] [--rate R] [--burst B] [--token T]\n"+
			"       [--pair-rate R] [--pair-burst B] [--account-limit N] [--account-window D]\n"+
			"The limits are strict token buckets counted at the fake's ingress. While it runs,\n"+
			"POST /_admin/rate?key=K&rate=R sets a hidden rate (key empty: every number) and\n"+
			"POST /_admin/fail?key=K&n=N answers the next N requests of K with HTTP 500\n"+
			"(counted as failed, not throttled, in /_stats).")
		fs.PrintDefaults()
	}
	addr := fs.String("addr", "127.0.0.1:0", "listen address")
	rate := fs.Float64("rate", 80, "messages per second allowed per phone-number ID (0 = unlimited)")
	burst := fs.Int("burst", 0, "bucket capacity in messages (0 = ceil(rate))")
	token := fs.String("token", "", "the only bearer token accepted (empty = any)")
	pairRate := fs.Float64("pair-rate", whatsapptest.PairRate, "messages per second from one number to one recipient, answered 131056 beyond (0 = unlimited)")
	pairBurst := fs.Int("pair-burst", whatsapptest.PairBurst, "pair bucket capacity in messages")
	acctLimit := fs.Int("account-limit", 0, "requests per account (every number is its own) in --account-window, answered 80007 beyond (0 = unlimited)")
	acctWindow := fs.Duration("account-window", time.Hour, "rolling window of --account-limit")
	if len(args) > 0 && (args[0] == "-h" || args[0] == "-help" || args[0] == "--help") {
		fs.Usage()
		return errHelp
	}
	if len(args) == 0 || args[0] != "whatsapp" {
		fs.Usage()
		return &usageError{"fake-provider: the first argument must be a provider: whatsapp"}
	}
	if err := parseFlags(fs, args[1:]); err != nil {
		return err
	}
	// A negative limit would make a fake more lenient or meaningless than
	// the provider it stands for: refused, naming the flag.
	var bad []string
	for _, f := range []struct {
		name string
		v    float64
	}{{"rate", *rate}, {"burst", float64(*burst)}, {"pair-rate", *pairRate}, {"pair-burst", float64(*pairBurst)},
		{"account-limit", float64(*acctLimit)}} {
		if !(f.v >= 0) || math.IsInf(f.v, 0) {
			bad = append(bad, fmt.Sprintf("--%s %v: must be a finite number >= 0", f.name, f.v))
		}
	}
	if *acctWindow <= 0 {
		bad = append(bad, fmt.Sprintf("--account-window %v: must be > 0", *acctWindow))
	}
	if len(bad) > 0 {
		return &usageError{"fake-provider: " + strings.Join(bad, "; ")}
	}
	fake := whatsapptest.New(whatsapptest.Config{Rate: *rate, Burst: *burst, Token: *token,
		PairRate: *pairRate, PairBurst: *pairBurst, AccountLimit: *acctLimit, AccountWindow: *acctWindow})
	ln, err := net.Listen("tcp", *addr)
	if err != nil {
		return err
	}
	srv := &http.Server{Handler: fake.Handler(), ReadHeaderTimeout: 5 * time.Second}
	fmt.Fprintf(stdout, "fake whatsapp listening on http://%s (stats at /_stats)\n", ln.Addr())
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
