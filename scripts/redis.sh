#!/usr/bin/env bash
# scripts/redis.sh {start|stop|status|env}
#
# A private redis-server on a free 127.0.0.1 port for tests: no persistence,
# data and log in the run dir ($PACER_REDIS_RUN, default
# $PACER_CACHE_DIR/redis/run, default .cache/redis/run). start writes
# "127.0.0.1:PORT" to <run>/addr and prints it; if the server is already
# running it just prints the address.
#
# The same server also listens for TLS on a second port (certificates of a
# throw-away CA made by scripts/certs.sh in <run>/tls; a client certificate
# is optional) and has an ACL user "pacer" whose random password is in
# <run>/acl/password. The default user stays password-less for the plain
# port's tests. env prints the export lines for tests:
# PACER_TEST_REDIS_TLS_ADDR, PACER_TEST_REDIS_CA, PACER_TEST_REDIS_CLIENT_CERT,
# PACER_TEST_REDIS_CLIENT_KEY, PACER_TEST_REDIS_USERNAME,
# PACER_TEST_REDIS_PASSWORD_FILE.
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
CACHE=${PACER_CACHE_DIR:-$ROOT/.cache}
RUN=${PACER_REDIS_RUN:-$CACHE/redis/run}

SELF=redis.sh
# shellcheck source=scripts/lib.sh
. "$ROOT/scripts/lib.sh"

# PING in the inline protocol over bash's /dev/tcp (no redis-cli needed)
ping_redis() {
	local addr=$1 line
	{
		exec 3<>"/dev/tcp/${addr%:*}/${addr##*:}" &&
			printf 'PING\r\n' >&3 &&
			IFS= read -r -t 2 line <&3 &&
			[[ $line == "+PONG"* ]]
	} 2>/dev/null
	local rc=$?
	exec 3<&- 3>&- 2>/dev/null || true
	return $rc
}

server_pid() {
	local pid
	[[ -f $RUN/redis.pid ]] || return 1
	pid=$(cat "$RUN/redis.pid" 2>/dev/null) || return 1
	[[ $pid =~ ^[0-9]+$ ]] && kill -0 "$pid" 2>/dev/null || return 1
	grep -qa redis-server "/proc/$pid/cmdline" 2>/dev/null || return 1
	echo "$pid"
}

start() {
	command -v redis-server >/dev/null ||
		die "redis-server is not installed: run scripts/test-env.sh (apt-get install redis-server)"
	mkdir -p "$RUN"
	exec 9>"$RUN.lock"
	flock -w 60 9 || die "timed out waiting for another redis.sh start"
	if server_pid >/dev/null && [[ -s $RUN/addr ]] && ping_redis "$(cat "$RUN/addr")"; then
		cat "$RUN/addr"
		return 0
	fi
	stop_server
	local port tport addr pid password
	"$ROOT/scripts/certs.sh" "$RUN/tls"
	rm -rf "$RUN/acl" && mkdir -m 700 "$RUN/acl"
	password=$(head -c 48 /dev/urandom | base64 | tr -dc 'A-Za-z0-9' | head -c 24)
	(umask 077 && printf '%s' "$password" >"$RUN/acl/password")
	# In a file, not on the command line, where ps would show the password.
	(umask 077 && cat >"$RUN/acl/redis.conf" <<CONF
tls-cert-file $RUN/tls/server.pem
tls-key-file $RUN/tls/server.key
tls-ca-cert-file $RUN/tls/ca.pem
tls-auth-clients optional
user pacer on >$password ~* &* +@all
CONF
	)
	for _ in 1 2 3 4 5; do
		port=$((20000 + RANDOM % 12000))
		tport=$((20000 + RANDOM % 12000))
		[[ $port != "$tport" ]] || continue
		port_in_use "$port" && continue
		port_in_use "$tport" && continue
		addr="127.0.0.1:$port"
		rm -f "$RUN/redis.pid" "$RUN/addr" "$RUN/redis.log" "$RUN/env"
		redis-server "$RUN/acl/redis.conf" --port "$port" --tls-port "$tport" \
			--bind 127.0.0.1 --save "" --appendonly no \
			--dir "$RUN" --daemonize yes --pidfile "$RUN/redis.pid" \
			--logfile "$RUN/redis.log" </dev/null >/dev/null 2>&1 9>&- || true
		for _ in $(seq 1 100); do
			if ping_redis "$addr" && port_in_use "$tport"; then
				cat >"$RUN/env" <<ENV
export PACER_TEST_REDIS_TLS_ADDR=127.0.0.1:$tport
export PACER_TEST_REDIS_CA=$RUN/tls/ca.pem
export PACER_TEST_REDIS_CLIENT_CERT=$RUN/tls/client.pem
export PACER_TEST_REDIS_CLIENT_KEY=$RUN/tls/client.key
export PACER_TEST_REDIS_USERNAME=pacer
export PACER_TEST_REDIS_PASSWORD_FILE=$RUN/acl/password
ENV
				echo "$addr" >"$RUN/addr"
				echo "$addr"
				return 0
			fi
			grep -q 'Address already in use' "$RUN/redis.log" 2>/dev/null && break
			sleep 0.05
		done
		if pid=$(server_pid); then kill -KILL "$pid" 2>/dev/null || true; fi
		grep -q 'Address already in use' "$RUN/redis.log" 2>/dev/null && continue
		tail -n 20 "$RUN/redis.log" >&2 2>/dev/null || true
		die "redis-server did not answer PING on $addr"
	done
	die "no free port for redis-server"
}

stop_server() {
	local pid
	if pid=$(server_pid); then
		kill -TERM "$pid" 2>/dev/null || true
		for _ in $(seq 1 100); do
			kill -0 "$pid" 2>/dev/null || break
			sleep 0.1
		done
		kill -KILL "$pid" 2>/dev/null || true
	fi
	rm -f "$RUN/redis.pid" "$RUN/addr" "$RUN/env"
}

case "${1:-}" in
start) start ;;
stop) stop_server ;;
env) env_lines server_pid redis-server ;;
status) server_status server_pid addr ;;
*)
	echo "usage: $0 {start|stop|status|env}" >&2
	exit 2
	;;
esac
