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
		fmt.Fprintln(stderr, "usage: pacer fake-provider whatsapp [--addr A] [--rate R] [--burst B] [--token T]")
		fs.PrintDefaults()
	}
	addr := fs.String("addr", "127.0.0.1:0", "listen address")
	rate := fs.Float64("rate", 80, "messages per second allowed per phone-number ID (0 = unlimited)")
	burst := fs.Int("burst", 0, "bucket capacity in messages (0 = ceil(rate))")
	token := fs.String("token", "", "the only bearer token accepted (empty = any)")
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
	fake := whatsapptest.New(whatsapptest.Config{Rate: *rate, Burst: *burst, Token: *token})
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
