#!/usr/bin/env bash
# scripts/redis-cluster.sh {start|stop|status}
#
# A private Redis Cluster for tests: three masters, no replicas
# (redis-server --cluster-enabled yes on free 127.0.0.1 ports, joined with
# redis-cli --cluster create), no persistence, everything in the run dir
# ($PACER_REDIS_CLUSTER_RUN, default $PACER_CACHE_DIR/redis-cluster/run,
# default .cache/redis-cluster/run). start writes the comma-separated
# addresses "127.0.0.1:P1,127.0.0.1:P2,127.0.0.1:P3" to <run>/addrs and
# prints them once every slot is served; if the cluster is already up it
# just prints them. Needs redis-server and redis-cli (Debian: redis-server,
# redis-tools).
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
CACHE=${PACER_CACHE_DIR:-$ROOT/.cache}
RUN=${PACER_REDIS_CLUSTER_RUN:-$CACHE/redis-cluster/run}
NODES=3

SELF=redis-cluster.sh
# shellcheck source=scripts/lib.sh
. "$ROOT/scripts/lib.sh"

node_pid() { # node_pid I: pid of node I if it runs
	local pid f=$RUN/node$1/redis.pid
	[[ -f $f ]] || return 1
	pid=$(cat "$f" 2>/dev/null) || return 1
	[[ $pid =~ ^[0-9]+$ ]] && kill -0 "$pid" 2>/dev/null || return 1
	grep -qa redis-server "/proc/$pid/cmdline" 2>/dev/null || return 1
	echo "$pid"
}

cluster_ok() { # cluster_ok ADDRS: every node reports cluster_state:ok
	local a
	for a in ${1//,/ }; do
		redis-cli -h "${a%:*}" -p "${a##*:}" cluster info 2>/dev/null | grep -q '^cluster_state:ok' || return 1
	done
}

start() {
	local pid
	command -v redis-server >/dev/null && command -v redis-cli >/dev/null ||
		die "redis-server and redis-cli are needed: apt-get install redis-server redis-tools"
	mkdir -p "$RUN"
	exec 9>"$RUN.lock"
	flock -w 120 9 || die "timed out waiting for another redis-cluster.sh start"
	if [[ -s $RUN/addrs ]] && cluster_ok "$(cat "$RUN/addrs")"; then
		cat "$RUN/addrs"
		return 0
	fi
	stop_nodes
	local i port addrs=() tries up dir
	for ((i = 1; i <= NODES; i++)); do
		dir=$RUN/node$i
		up=
		for tries in 1 2 3 4 5 6 7 8; do
			# Node port and cluster bus port (+10000) both below the usual
			# ephemeral range (32768-), where a client's source port can hold
			# a port that a connect test sees as free.
			port=$((20000 + RANDOM % 2700))
			if port_in_use "$port" || port_in_use $((port + 10000)); then
				continue
			fi
			rm -rf "$dir" && mkdir -p "$dir"
			redis-server --port "$port" --bind 127.0.0.1 --save "" --appendonly no \
				--cluster-enabled yes --cluster-config-file nodes.conf --cluster-node-timeout 5000 \
				--dir "$dir" --daemonize yes --pidfile "$dir/redis.pid" --logfile "$dir/redis.log" \
				</dev/null >/dev/null 2>&1 9>&- || true
			for _ in $(seq 1 100); do
				if redis-cli -p "$port" ping 2>/dev/null | grep -q PONG; then
					up=1
					break
				fi
				grep -q 'Address already in use' "$dir/redis.log" 2>/dev/null && break
				sleep 0.05
			done
			[[ -n $up ]] && break
			if pid=$(node_pid "$i"); then kill -KILL "$pid" 2>/dev/null || true; fi
			grep -q 'Address already in use' "$dir/redis.log" 2>/dev/null && continue
			break
		done
		if [[ -z $up ]]; then
			tail -n 20 "$dir/redis.log" >&2 2>/dev/null || true
			stop_nodes
			die "node $i did not answer PING (last port $port)"
		fi
		addrs+=("127.0.0.1:$port")
	done
	if ! redis-cli --cluster create "${addrs[@]}" --cluster-replicas 0 --cluster-yes \
		</dev/null >"$RUN/create.log" 2>&1 9>&-; then
		tail -n 20 "$RUN/create.log" >&2
		stop_nodes
		die "redis-cli --cluster create failed"
	fi
	local joined
	joined=$(
		IFS=,
		echo "${addrs[*]}"
	)
	for _ in $(seq 1 200); do
		if cluster_ok "$joined"; then
			echo "$joined" >"$RUN/addrs"
			echo "$joined"
			return 0
		fi
		sleep 0.05
	done
	stop_nodes
	die "the cluster did not reach cluster_state:ok within 10 s"
}

stop_nodes() {
	local i pid
	for ((i = 1; i <= NODES; i++)); do
		if pid=$(node_pid "$i"); then
			kill -TERM "$pid" 2>/dev/null || true
		fi
	done
	for ((i = 1; i <= NODES; i++)); do
		if pid=$(node_pid "$i"); then
			for _ in $(seq 1 100); do
				kill -0 "$pid" 2>/dev/null || break
				sleep 0.1
			done
			kill -KILL "$pid" 2>/dev/null || true
		fi
	done
	rm -f "$RUN/addrs"
}

status() {
	if [[ -s $RUN/addrs ]] && cluster_ok "$(cat "$RUN/addrs")"; then
		echo "running $(cat "$RUN/addrs")"
	else
		echo "stopped"
		return 1
	fi
}

case "${1:-}" in
start) start ;;
stop) stop_nodes ;;
status) status ;;
*)
	echo "usage: $0 {start|stop|status}" >&2
	exit 2
	;;
esac
