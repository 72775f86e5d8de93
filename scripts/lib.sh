# scripts/lib.sh: what scripts/kafka.sh, scripts/redis.sh and
# scripts/redis-cluster.sh share; sourced by them, not run. The sourcing
# script sets SELF (its file name, for messages) and RUN (its run dir) first.

log() { printf '%s: %s\n' "$SELF" "$*" >&2; }
die() { log "$*"; exit 1; }

port_in_use() { (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null; }

# env_lines PID_FN WHAT: print <run>/env, the export lines for tests, if
# PID_FN finds the server (WHAT, for the error) running; else fail.
env_lines() {
	"$1" >/dev/null && [[ -s $RUN/env ]] || die "no running $2 in $RUN (scripts/$SELF start)"
	cat "$RUN/env"
}

# server_status PID_FN ADDR_FILE: print "running <address> pid <pid>" if
# PID_FN finds the server running and <run>/ADDR_FILE holds its address;
# else print "stopped" and return 1.
server_status() {
	if "$1" >/dev/null && [[ -s $RUN/$2 ]]; then
		echo "running $(cat "$RUN/$2") pid $("$1")"
	else
		echo "stopped"
		return 1
	fi
}
