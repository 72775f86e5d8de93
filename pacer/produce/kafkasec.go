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

// When a broker closes a new connection before its first answer, franz-go
// returns a [kgo.ErrFirstReadEOF] whose kind (unexported) says when; its
// message is the only way to read it (pkg/kgo, errors.go):
//   - closedAfterDial: during the dial, which with TLS on is the
//     handshake: a listener that does not speak TLS drops a ClientHello.
//   - closedAtAPIVersions: at the client's first request, ApiVersions: a
//     TLS listener drops a plaintext request.
//   - closedAfterRequest: at a request after ApiVersions, with no SASL
//     configured: a SASL listener drops a request sent before
//     authenticating.
const (
	closedAfterDial     = "closed the connection immediately after a dial"
	closedAtAPIVersions = "closed the connection immediately during api versions"
	closedAfterRequest  = "closed the connection immediately after a request was issued"
)

// SecurityFailure is which part of a secured Kafka connection failed: a
// failure no retry mends. The one place that reads these errors is
// [KafkaSecurity]; commands map a kind to the settings to look at.
type SecurityFailure int

// The kinds of [SecurityFailure].
const (
	NoSecurityFailure   SecurityFailure = iota // not a security failure
	SASLAuthFailed                             // the brokers refused the credentials
	SASLMechanism                              // the listener takes SASL but not this mechanism
	SASLNotOffered                             // the listener takes no SASL (PLAINTEXT or SSL) and the client uses it
	SASLExpected                               // the listener expects SASL and the client does not use it
	TLSUnknownCA                               // the broker's certificate is signed by an unknown authority
	TLSHostname                                // the broker's certificate is not valid for the host name
	TLSCertInvalid                             // the broker's certificate is expired or otherwise invalid
	TLSNotTLS                                  // the broker does not answer in TLS (a plaintext or SASL_PLAINTEXT listener)
	TLSHandshakeRefused                        // the broker sent a TLS alert (client certificate missing or refused)
	TLSToPlaintext                             // the broker answered in TLS to a plaintext client
	TLSClosed                                  // the broker closed the connection during the TLS handshake: not a TLS listener
	TLSExpected                                // the broker closed the connection at a plaintext client's first request: a TLS listener
	ClosedAtOnce                               // the broker closed the connection at once, at no step franz-go names: TLS or SASL on one side only
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
	case errors.Is(err, kerr.UnsupportedSaslMechanism):
		return SASLMechanism, "SASL: the listener does not offer this mechanism"
	case errors.Is(err, kerr.IllegalSaslState):
		// What a listener without SASL answers a SaslHandshake.
		return SASLNotOffered, "SASL: the listener does not take SASL (a PLAINTEXT or SSL listener)"
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
	case errors.As(err, &eof) && strings.Contains(eof.Error(), closedAfterDial):
		return TLSClosed, "TLS: the broker closed the connection during the handshake (a plaintext or SASL_PLAINTEXT listener)"
	case errors.As(err, &eof) && strings.Contains(eof.Error(), closedAtAPIVersions):
		return TLSExpected, "the broker closed the connection at the client's first request (a listener that expects TLS)"
	case errors.As(err, &eof) && strings.Contains(eof.Error(), closedAfterRequest):
		return SASLExpected, "the broker closed the connection at the first request before authentication (a SASL_SSL or SASL_PLAINTEXT listener)"
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
