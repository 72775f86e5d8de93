#!/usr/bin/env bash
# scripts/certs.sh DIR
#
# A throw-away certificate authority and two certificates signed by it, for
# the TLS listeners of the test servers (scripts/kafka.sh, scripts/redis.sh):
#
#   DIR/ca.pem                   the CA certificate (what clients trust)
#   DIR/server.pem, server.key   for 127.0.0.1 and localhost (SANs)
#   DIR/server-keystore.pem      server.key then server.pem (Kafka's PEM keystore)
#   DIR/client.pem, client.key   a client certificate (CN=pacer-client) for mTLS
#
# Keys are EC P-256 in unencrypted PKCS#8, valid 30 days; the CA's key is
# deleted once both are signed. Needs openssl (Debian: openssl).
set -euo pipefail

log() { printf 'certs.sh: %s\n' "$*" >&2; }
die() { log "$*"; exit 1; }

[[ $# -eq 1 ]] || die "usage: $0 DIR"
command -v openssl >/dev/null || die "openssl is not installed (apt-get install openssl)"
dir=$1
mkdir -p "$dir"
chmod 700 "$dir"
cd "$dir"
rm -f ca.pem ca.key server.* client.* server-keystore.pem

ossl() {
	local out
	out=$(openssl "$@" 2>&1) || { printf '%s\n' "$out" >&2; die "openssl $1 failed"; }
}

ossl req -x509 -new -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes \
	-keyout ca.key -out ca.pem -days 30 -subj "/CN=Pacer test CA" \
	-addext "basicConstraints=critical,CA:TRUE" -addext "keyUsage=critical,keyCertSign,cRLSign"

# sign NAME SUBJECT EXTENSIONS
sign() {
	ossl req -new -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes \
		-keyout "$1.key" -out "$1.csr" -subj "$2"
	printf '%s\n' "$3" >"$1.ext"
	ossl x509 -req -in "$1.csr" -CA ca.pem -CAkey ca.key -set_serial "0x$(openssl rand -hex 8)" \
		-days 30 -out "$1.pem" -extfile "$1.ext"
	rm -f "$1.csr" "$1.ext"
}
sign server "/CN=127.0.0.1" "subjectAltName=IP:127.0.0.1,DNS:localhost
keyUsage=critical,digitalSignature
extendedKeyUsage=serverAuth,clientAuth"
sign client "/CN=pacer-client" "keyUsage=critical,digitalSignature
extendedKeyUsage=clientAuth"
rm -f ca.key
cat server.key server.pem >server-keystore.pem
chmod 600 ./*.key server-keystore.pem
