package pacer

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"net"
	"strings"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
)

// plaintextToTLS is how franz-go (pkg/kgo, broker.go) says that a
// plaintext client got a TLS alert for an answer; the error has no type.
const plaintextToTLS = "is this a plaintext connection speaking to a tls endpoint"

// securityCause says which part of a secured connection failed, in words
// ("authentication failed", "TLS: certificate signed by unknown
// authority"), or "" when err is no such failure.
func securityCause(err error) string {
	var (
		unknownCA x509.UnknownAuthorityError
		host      x509.HostnameError
		invalid   x509.CertificateInvalidError
		header    tls.RecordHeaderError
		op        *net.OpError
		eof       *kgo.ErrFirstReadEOF
	)
	switch {
	case errors.Is(err, kerr.SaslAuthenticationFailed):
		return "authentication failed"
	case errors.Is(err, kerr.UnsupportedSaslMechanism), errors.Is(err, kerr.IllegalSaslState):
		return "the brokers do not offer this SASL mechanism on this listener"
	case errors.As(err, &unknownCA):
		return "TLS: certificate signed by unknown authority"
	case errors.As(err, &host):
		return "TLS: the broker's certificate is not valid for " + host.Host
	case errors.As(err, &invalid):
		return "TLS: " + strings.TrimPrefix(invalid.Error(), "x509: ")
	case errors.As(err, &header):
		return "TLS: the broker does not answer in TLS (a plaintext or SASL_PLAINTEXT listener)"
	case errors.As(err, &op) && op.Op == "remote error":
		// A TLS alert from the broker: "tls: certificate required",
		// "tls: bad certificate", ...
		return "TLS: the broker refused the handshake (" + op.Err.Error() + ")"
	case err != nil && strings.Contains(err.Error(), plaintextToTLS):
		return "TLS: the broker answered in TLS to a plaintext client"
	case errors.As(err, &eof):
		return "the broker closed the connection at once: it expects TLS or SASL and the client does not use it, or the reverse"
	}
	return ""
}
