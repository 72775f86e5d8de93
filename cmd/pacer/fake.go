package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
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
			"POST /_admin/fail?key=K&n=N answers the next N requests of K with HTTP 500.")
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
