#!/usr/bin/env bash
# scripts/test-env.sh: everything the integration tests need, started.
#
# Installs what is missing (redis-server, kcat, Java, Maven, Chromium, openssl)
# with apt-get, takes promtool out of Debian's prometheus package into .cache,
# fetches and starts the Kafka broker (scripts/kafka.sh), a private
# redis-server (scripts/redis.sh) and a three-master Redis Cluster
# (scripts/redis-cluster.sh), then prints
#
#   export PACER_TEST_KAFKA_BROKERS=127.0.0.1:PORT
#   export PACER_TEST_REDIS_ADDR=127.0.0.1:PORT
#   export PACER_TEST_REDIS_CLUSTER=127.0.0.1:P1,127.0.0.1:P2,127.0.0.1:P3
#   export PACER_PROMTOOL=<path of promtool>
#   export PACER_TEST_STARTED='kafka redis redis-cluster'   (those this call started)
#
# and the secured listeners of the broker and the server it started
# (`scripts/kafka.sh env`, `scripts/redis.sh env`): PACER_TEST_KAFKA_SASL_BROKERS
# (SASL_SSL), PACER_TEST_KAFKA_MTLS_BROKERS (SSL with a client certificate),
# PACER_TEST_KAFKA_CA, ..., PACER_TEST_REDIS_TLS_ADDR, PACER_TEST_REDIS_CA, ...
#
# Use:  eval "$(scripts/test-env.sh)"   or   . scripts/test-env.sh
# Variables already set in the environment are kept and nothing is started
# for them. Stop with scripts/kafka.sh stop; scripts/redis.sh stop;
# scripts/redis-cluster.sh stop.

_pacer_test_env() {
	set -euo pipefail
	local root
	root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
	log() { printf 'test-env.sh: %s\n' "$*" >&2; }

	# command -> Debian package
	local -A pkg=([redis-server]=redis-server [redis-cli]=redis-tools [kcat]=kcat [java]=openjdk-17-jre-headless [mvn]=maven
		[chromium]=chromium [openssl]=openssl)
	local missing=() c sudo=()
	for c in redis-server redis-cli kcat java mvn chromium openssl; do
		command -v "$c" >/dev/null || missing+=("${pkg[$c]}")
	done
	if ((${#missing[@]})); then
		if [[ $(id -u) -ne 0 ]]; then
			if command -v sudo >/dev/null && sudo -n true 2>/dev/null; then
				sudo=(sudo -n)
			else
				log "missing packages: ${missing[*]}; not root and no password-less sudo, so install them yourself:"
				log "  sudo apt-get update && sudo apt-get install -y ${missing[*]}"
				return 1
			fi
		fi
		log "installing ${missing[*]}"
		local aptlog
		aptlog=$(mktemp)
		if ! { "${sudo[@]}" env DEBIAN_FRONTEND=noninteractive apt-get update -q &&
			"${sudo[@]}" env DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends "${missing[@]}"; } \
			</dev/null >"$aptlog" 2>&1; then
			tail -n 30 "$aptlog" >&2
			rm -f "$aptlog"
			log "apt-get failed"
			return 1
		fi
		rm -f "$aptlog"
	fi

	# promtool (deploy's alert-rule tests): taken out of Debian's prometheus
	# package into .cache, without installing the package (that would start
	# a Prometheus server).
	local promtool=${PACER_PROMTOOL:-$root/.cache/promtool/usr/bin/promtool}
	if [[ ! -x $promtool ]]; then
		command -v apt-get >/dev/null || { log "no apt-get to fetch promtool; set PACER_PROMTOOL"; return 1; }
		log "fetching promtool (Debian package prometheus)"
		local work
		work=$(mktemp -d)
		if ! (cd "$work" && apt-get download prometheus </dev/null >apt.log 2>&1 ||
			{ "${sudo[@]}" env DEBIAN_FRONTEND=noninteractive apt-get update -q && apt-get download prometheus; } </dev/null >>apt.log 2>&1); then
			tail -n 20 "$work/apt.log" >&2
			rm -rf "$work"
			log "apt-get download prometheus failed"
			return 1
		fi
		rm -rf "$root/.cache/promtool"
		mkdir -p "$root/.cache/promtool"
		dpkg-deb -x "$work"/prometheus_*.deb "$work/x"
		mkdir -p "$root/.cache/promtool/usr/bin"
		mv "$work/x/usr/bin/promtool" "$root/.cache/promtool/usr/bin/promtool"
		rm -rf "$work"
		promtool=$root/.cache/promtool/usr/bin/promtool
	fi
	PACER_PROMTOOL=$promtool

	# started: the servers this call started (not found running in their
	# run directories), the ones the make targets stop when they end.
	local secure=() started=()
	if [[ -z ${PACER_TEST_KAFKA_BROKERS:-} ]]; then
		"$root/scripts/kafka.sh" status >/dev/null 2>&1 || started+=(kafka)
		PACER_TEST_KAFKA_BROKERS=$("$root/scripts/kafka.sh" start)
		[[ -n ${PACER_TEST_KAFKA_SASL_BROKERS:-} ]] || secure+=("$("$root/scripts/kafka.sh" env)")
	fi
	if [[ -z ${PACER_TEST_REDIS_ADDR:-} ]]; then
		"$root/scripts/redis.sh" status >/dev/null 2>&1 || started+=(redis)
		PACER_TEST_REDIS_ADDR=$("$root/scripts/redis.sh" start)
		[[ -n ${PACER_TEST_REDIS_TLS_ADDR:-} ]] || secure+=("$("$root/scripts/redis.sh" env)")
	fi
	if [[ -z ${PACER_TEST_REDIS_CLUSTER:-} ]]; then
		"$root/scripts/redis-cluster.sh" status >/dev/null 2>&1 || started+=(redis-cluster)
		PACER_TEST_REDIS_CLUSTER=$("$root/scripts/redis-cluster.sh" start)
	fi
	PACER_TEST_STARTED="${started[*]}"
	export PACER_TEST_KAFKA_BROKERS PACER_TEST_REDIS_ADDR PACER_TEST_REDIS_CLUSTER PACER_PROMTOOL PACER_TEST_STARTED
	printf 'export PACER_TEST_KAFKA_BROKERS=%q\n' "$PACER_TEST_KAFKA_BROKERS"
	printf 'export PACER_TEST_REDIS_ADDR=%q\n' "$PACER_TEST_REDIS_ADDR"
	printf 'export PACER_TEST_REDIS_CLUSTER=%q\n' "$PACER_TEST_REDIS_CLUSTER"
	printf 'export PACER_PROMTOOL=%q\n' "$PACER_PROMTOOL"
	printf 'export PACER_TEST_STARTED=%q\n' "$PACER_TEST_STARTED"
	# Lines of kafka.sh env and redis.sh env: "export NAME=VALUE" with
	# values of ports and paths only.
	local block
	for block in "${secure[@]}"; do
		printf '%s\n' "$block"
	done
}

if [[ ${BASH_SOURCE[0]} != "$0" ]]; then
	# sourced: run as a child (its set -e must not end the caller's shell)
	# and take over the exports
	unset -f _pacer_test_env
	if _pacer_env=$(bash "${BASH_SOURCE[0]}"); then
		eval "$_pacer_env"
		unset _pacer_env
	else
		unset _pacer_env
		return 1
	fi
else
	_pacer_test_env
fi
