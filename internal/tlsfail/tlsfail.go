// Package tlsfail reads why a TLS connection failed from the errors of
// crypto/tls, crypto/x509 and net, so that the Kafka and Redis messages
// of the commands say it in the same words.
package tlsfail

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"net"
	"strings"
)

// Kind is which part of a TLS connection failed; every kind is one no
// retry mends.
type Kind int

// The kinds [Of] reports.
const (
	None        Kind = iota // not a TLS failure
	UnknownCA               // the peer's certificate is signed by an unknown authority
	Hostname                // the peer's certificate is not valid for the host name
	CertInvalid             // the peer's certificate is expired or otherwise invalid
	NotTLS                  // the peer does not answer in TLS
	Refused                 // the peer sent a TLS alert (a client certificate missing or refused)
)

// Of says which TLS failure err reports and its cause in words, naming
// the peer as given ("broker", "server"): "TLS: certificate signed by
// unknown authority", "TLS: the server's certificate is not valid for
// redis.internal". None and "" when err (nil included) is no TLS failure.
func Of(err error, peer string) (Kind, string) {
	var (
		unknownCA x509.UnknownAuthorityError
		host      x509.HostnameError
		invalid   x509.CertificateInvalidError
		header    tls.RecordHeaderError
		op        *net.OpError
	)
	switch {
	case errors.As(err, &unknownCA):
		return UnknownCA, "TLS: certificate signed by unknown authority"
	case errors.As(err, &host):
		return Hostname, "TLS: the " + peer + "'s certificate is not valid for " + host.Host
	case errors.As(err, &invalid):
		return CertInvalid, "TLS: " + strings.TrimPrefix(invalid.Error(), "x509: ")
	case errors.As(err, &header):
		return NotTLS, "TLS: the " + peer + " does not answer in TLS"
	case errors.As(err, &op) && op.Op == "remote error":
		// A TLS alert from the peer: "tls: certificate required",
		// "tls: bad certificate", ...
		return Refused, "TLS: the " + peer + " refused the handshake (" + op.Err.Error() + ")"
	}
	return None, ""
}
