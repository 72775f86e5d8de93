package produce

import (
	"context"
	"errors"
	"net"
	"strings"
	"syscall"

	"github.com/pacerhq/pacer/internal/tlsfail"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
)

// plaintextToTLS is how franz-go (pkg/kgo, broker.go) says that a
// plaintext client got a TLS alert for an answer; the error has no type.
const plaintextToTLS = "is this a plaintext connection speaking to a tls endpoint"

// SecurityFailure is which part of a secured Kafka connection failed: a
// failure no retry mends. The one place that reads these errors is
// [KafkaSecurity]; commands map a kind to the settings to look at.
type SecurityFailure int

// The kinds of [SecurityFailure].
const (
	NoSecurityFailure   SecurityFailure = iota // not a security failure
	SASLAuthFailed                             // the brokers refused the credentials
	SASLMechanism                              // the listener does not offer this SASL mechanism
	TLSUnknownCA                               // the broker's certificate is signed by an unknown authority
	TLSHostname                                // the broker's certificate is not valid for the host name
	TLSCertInvalid                             // the broker's certificate is expired or otherwise invalid
	TLSNotTLS                                  // the broker does not answer in TLS (a plaintext or SASL_PLAINTEXT listener)
	TLSHandshakeRefused                        // the broker sent a TLS alert (client certificate missing or refused)
	TLSToPlaintext                             // the broker answered in TLS to a plaintext client
	ClosedAtOnce                               // the broker closed the connection at once: TLS or SASL on one side only
)

// tlsFailures maps the TLS failures [tlsfail.Of] reads to their kinds.
var tlsFailures = map[tlsfail.Kind]SecurityFailure{
	tlsfail.UnknownCA: TLSUnknownCA, tlsfail.Hostname: TLSHostname, tlsfail.CertInvalid: TLSCertInvalid,
	tlsfail.NotTLS: TLSNotTLS, tlsfail.Refused: TLSHandshakeRefused,
}

// KafkaSecurity says which part of a secured connection err reports as
// failed, and the cause in words ("authentication failed", "TLS:
// certificate signed by unknown authority"); NoSecurityFailure and ""
// when err is no such failure.
func KafkaSecurity(err error) (SecurityFailure, string) {
	var eof *kgo.ErrFirstReadEOF
	switch {
	case err == nil:
		return NoSecurityFailure, ""
	case errors.Is(err, kerr.SaslAuthenticationFailed):
		return SASLAuthFailed, "authentication failed"
	case errors.Is(err, kerr.UnsupportedSaslMechanism), errors.Is(err, kerr.IllegalSaslState):
		return SASLMechanism, "the brokers do not offer this SASL mechanism on this listener"
	}
	if k, cause := tlsfail.Of(err, "broker"); k != tlsfail.None {
		if k == tlsfail.NotTLS {
			cause += " (a plaintext or SASL_PLAINTEXT listener)"
		}
		return tlsFailures[k], cause
	}
	switch {
	case strings.Contains(err.Error(), plaintextToTLS):
		return TLSToPlaintext, "TLS: the broker answered in TLS to a plaintext client"
	case errors.As(err, &eof):
		return ClosedAtOnce, "the broker closed the connection at once: it expects TLS or SASL and the client does not use it, or the reverse"
	}
	return NoSecurityFailure, ""
}

// KafkaCause says why a Kafka request failed: a name that does not resolve,
// a broker that is down, credentials or certificates the brokers refuse
// ([KafkaSecurity]), or a broker that answered with an error. permanent
// is true when no retry can mend it: credentials, certificates, TLS or SASL
// on one side only.
func KafkaCause(err error) (cause string, permanent bool) {
	if _, c := KafkaSecurity(err); c != "" {
		return c, true
	}
	return kafkaCause(err), false
}

func kafkaCause(err error) string {
	var dns *net.DNSError
	if errors.As(err, &dns) {
		return "a seed broker's host name does not resolve"
	}
	var op *net.OpError
	if errors.As(err, &op) || errors.Is(err, syscall.ECONNREFUSED) || errors.Is(err, context.DeadlineExceeded) {
		return "nothing listens at the seed brokers (down, or a wrong port)"
	}
	return "the brokers refused the request"
}
