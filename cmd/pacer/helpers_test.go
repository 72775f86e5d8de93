package main

// Helpers of both the default suite and the process-level tests (build
// tag e2e).

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/pacerhq/pacer/internal/testenv"
	"github.com/twmb/franz-go/pkg/kgo"
)

func newKafkaClient(t testing.TB, brokers string, opts ...kgo.Opt) *kgo.Client {
	t.Helper()
	cl, err := kgo.NewClient(append([]kgo.Opt{kgo.SeedBrokers(strings.Split(brokers, ",")...)}, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(cl.Close)
	return cl
}

// consumeAll reads want records from topic, from the start, within 30 s.
func consumeAll(t testing.TB, brokers, topic string, want int) []*kgo.Record {
	t.Helper()
	cl := newKafkaClient(t, brokers, kgo.ConsumeTopics(topic), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var got []*kgo.Record
	for len(got) < want && ctx.Err() == nil {
		f := cl.PollFetches(ctx)
		f.EachRecord(func(r *kgo.Record) { got = append(got, r) })
	}
	// A short extra poll catches records beyond want.
	ctx2, cancel2 := context.WithTimeout(context.Background(), time.Second)
	defer cancel2()
	cl.PollFetches(ctx2).EachRecord(func(r *kgo.Record) { got = append(got, r) })
	return got
}

// waitFor polls cond every 100 ms until it holds (true) or within passes
// (false).
func waitFor(within time.Duration, cond func() bool) bool {
	return testenv.WaitFor(within, 100*time.Millisecond, cond)
}

// writeFile writes content to a file name in a directory of the test's
// own (removed when it ends), mode 0600, and returns the file's path.
func writeFile(t *testing.T, name, content string) string {
	t.Helper()
	f := filepath.Join(t.TempDir(), name)
	if err := os.WriteFile(f, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
	return f
}

// refusal is a command line main's run must refuse (exit status 2) and
// text its error must hold.
type refusal struct {
	args []string
	want string
}

// otherCA writes a CA certificate that signed none of the servers'
// certificates and returns its file.
func otherCA(t *testing.T) string {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "Another CA"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	f := filepath.Join(t.TempDir(), "other-ca.pem")
	if err := os.WriteFile(f, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), 0o600); err != nil {
		t.Fatal(err)
	}
	return f
}
