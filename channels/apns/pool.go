package apns

import (
	"crypto/tls"
	"net/http"
	"time"

	"github.com/pacerhq/pacer/channels"
	"github.com/pacerhq/pacer/channels/internal/h2pool"
)

const (
	// DefaultConnections is the bound on HTTP/2 connections per APNs host
	// when Config.Connections is 0: one, as Apple's own guidance and the
	// Pushy client (concurrentConnections, default 1) suggest. One
	// connection carries as many sends at once as APNs allows streams on it
	// (1,000 were seen, providers.md §2.1), far above PACER_INFLIGHT's
	// default of 32 per partition; raise it when a process keeps more sends
	// than that in flight to one team.
	DefaultConnections = 1
	// MaxConnections is the largest Config.Connections accepted.
	MaxConnections = 64

	// connIdleTimeout is how long an APNs connection stays open without a
	// request. Apple asks providers to keep connections open rather than
	// open and close them ([A-SR], providers.md §2.1); health PINGs find a
	// dead one meanwhile.
	connIdleTimeout = 15 * time.Minute
)

// conns counts the connections of every default client of the package.
var conns channels.ConnCounter

// Connections returns the counter of the connections the package's
// default clients (Config.HTTPClient nil) opened to APNs.
func Connections() *channels.ConnCounter { return &conns }

// defaultHTTPClient returns an HTTP/2-only client for APNs whose
// connections per host are bounded by n. A request beyond the streams the
// connections allow waits for one to finish, or for the server to allow
// more (APNs allows 1 stream until a valid provider token is posted, then
// raises the limit with SETTINGS), instead of opening a connection: APNs
// treats rapid connection and disconnection as a denial-of-service attack
// ([A-LEG], providers.md §2.1). A new connection takes one request until
// its first answer arrives, by which time APNs's SETTINGS are known. An
// http:// BaseURL (a local fake, such as `pacer fake-provider --channel
// apns`) is spoken to in HTTP/2 without TLS, with prior knowledge (h2c);
// APNs itself is served over https only.
func defaultHTTPClient(n int, tlsConfig *tls.Config) *http.Client {
	p := h2pool.New(h2pool.Config{Name: "apns", MaxConns: n, TLSConfig: tlsConfig,
		HTTP2Only: true, FirstAnswer: true, IdleTimeout: connIdleTimeout, Conns: &conns})
	return &http.Client{Transport: p, Timeout: DefaultTimeout}
}
