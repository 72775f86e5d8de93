#!/usr/bin/env bash
# scripts/kafka.sh {fetch|start|stop|down|up|restart|status|env}
#
# A real single-node Apache Kafka broker (KRaft, broker+controller) on
# 127.0.0.1 for tests, assembled from Maven Central jars (no Docker).
#
#   fetch   resolve the broker classpath into $PACER_CACHE_DIR/kafka/lib
#           (default .cache/kafka/lib, git-ignored)
#   start   fetch if needed, pick free ports, format fresh storage, start the
#           broker in the run dir ($PACER_KAFKA_RUN, default .cache/kafka/run),
#           wait until it serves Metadata and a produce/consume round trip,
#           write "127.0.0.1:PORT" to <run>/bootstrap and print it.
#           Already running: print its address.
#           Besides the PLAINTEXT listener the broker has a SASL_SSL one
#           (PLAIN, SCRAM-SHA-256 and SCRAM-SHA-512 for user "pacer", whose
#           random password is in <run>/sasl/password; the SCRAM credentials
#           are written at format time) and an SSL one that requires a client
#           certificate (mTLS), both with certificates of a throw-away CA
#           made by scripts/certs.sh in <run>/tls.
#   env     print the export lines of the secured listeners for tests:
#           PACER_TEST_KAFKA_SASL_BROKERS, PACER_TEST_KAFKA_MTLS_BROKERS,
#           PACER_TEST_KAFKA_CA, PACER_TEST_KAFKA_CLIENT_CERT, _CLIENT_KEY,
#           PACER_TEST_KAFKA_SASL_USERNAME, PACER_TEST_KAFKA_SASL_PASSWORD_FILE
#   stop    SIGTERM, then SIGKILL after 30 s
#   down    stop the broker (as stop does) but keep its ports and data for up
#   up      start a broker stopped by down again on the same ports and data
#           and wait until it serves Metadata; print its address
#   restart down, then up: what a rolling restart looks like to clients
#   status  print the address and exit 0 if running, else exit 1
#
# Environment: PACER_CACHE_DIR, PACER_KAFKA_RUN, PACER_KAFKA_VERSION
# (default 4.3.1), PACER_KAFKA_HEAP (default "-Xms512m -Xmx1g"),
# PACER_KAFKA_READY_TIMEOUT (seconds, default 90).
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
CACHE=${PACER_CACHE_DIR:-$ROOT/.cache}
KAFKA_VERSION=${PACER_KAFKA_VERSION:-4.3.1}
SLF4J_VERSION=2.0.17
LOG4J_VERSION=2.24.3
DEP_PLUGIN_VERSION=3.8.1
LIB=$CACHE/kafka/lib
RUN=${PACER_KAFKA_RUN:-$CACHE/kafka/run}
READY_TIMEOUT=${PACER_KAFKA_READY_TIMEOUT:-90}
HEAP=${PACER_KAFKA_HEAP:--Xms512m -Xmx1g}

SELF=kafka.sh
# shellcheck source=scripts/lib.sh
. "$ROOT/scripts/lib.sh"

# ------------------------------------------------------------------ fetch

slf4j_bindings() {
	# Jars that bind SLF4J to a logging backend; exactly one must be present.
	find "$1" -maxdepth 1 -name '*.jar' \( \
		-name 'log4j-slf4j2-impl-*' -o -name 'log4j-slf4j-impl-*' \
		-o -name 'slf4j-reload4j-*' -o -name 'slf4j-log4j12-*' \
		-o -name 'logback-classic-*' -o -name 'slf4j-simple-*' \
		-o -name 'slf4j-jdk14-*' -o -name 'slf4j-nop-*' \) -printf '%f\n'
}

fetch() {
	if [[ -f $LIB/.complete && $(cat "$LIB/.complete") == "$KAFKA_VERSION" ]]; then
		return 0
	fi
	command -v java >/dev/null || die "java is not installed (Java 17+ needed)"
	command -v mvn >/dev/null || die "mvn is not installed (apt-get install maven)"
	mkdir -p "$CACHE/kafka"
	local work
	work=$(mktemp -d "$CACHE/kafka/fetch.XXXXXX")
	# shellcheck disable=SC2064
	trap "rm -rf '$work'" EXIT
	cat >"$work/pom.xml" <<EOF
<?xml version="1.0" encoding="UTF-8"?>
<project xmlns="http://maven.apache.org/POM/4.0.0">
  <modelVersion>4.0.0</modelVersion>
  <groupId>com.pacerhq.testenv</groupId>
  <artifactId>kafka-broker-classpath</artifactId>
  <version>1</version>
  <packaging>pom</packaging>
  <dependencies>
    <dependency>
      <groupId>org.apache.kafka</groupId>
      <artifactId>kafka_2.13</artifactId>
      <version>$KAFKA_VERSION</version>
      <exclusions>
        <exclusion><groupId>org.apache.logging.log4j</groupId><artifactId>log4j-slf4j-impl</artifactId></exclusion>
        <exclusion><groupId>org.slf4j</groupId><artifactId>slf4j-reload4j</artifactId></exclusion>
        <exclusion><groupId>org.slf4j</groupId><artifactId>slf4j-log4j12</artifactId></exclusion>
        <exclusion><groupId>ch.qos.logback</groupId><artifactId>logback-classic</artifactId></exclusion>
      </exclusions>
    </dependency>
    <dependency><groupId>org.slf4j</groupId><artifactId>slf4j-api</artifactId><version>$SLF4J_VERSION</version></dependency>
    <dependency><groupId>org.apache.logging.log4j</groupId><artifactId>log4j-slf4j2-impl</artifactId><version>$LOG4J_VERSION</version></dependency>
    <dependency><groupId>org.apache.logging.log4j</groupId><artifactId>log4j-api</artifactId><version>$LOG4J_VERSION</version></dependency>
    <dependency><groupId>org.apache.logging.log4j</groupId><artifactId>log4j-core</artifactId><version>$LOG4J_VERSION</version></dependency>
  </dependencies>
  <build>
    <plugins>
      <plugin>
        <groupId>org.apache.maven.plugins</groupId>
        <artifactId>maven-dependency-plugin</artifactId>
        <version>$DEP_PLUGIN_VERSION</version>
      </plugin>
    </plugins>
  </build>
</project>
EOF
	log "fetching kafka_2.13 $KAFKA_VERSION and its dependencies with Maven"
	if ! mvn -B -q -f "$work/pom.xml" -DincludeScope=runtime \
		-DoutputDirectory="$work/lib" dependency:copy-dependencies \
		</dev/null >"$work/mvn.log" 2>&1; then
		tail -n 40 "$work/mvn.log" >&2
		die "mvn dependency:copy-dependencies failed"
	fi
	local bindings
	bindings=$(slf4j_bindings "$work/lib")
	if [[ $(grep -c . <<<"$bindings") -ne 1 ]]; then
		die "expected exactly one SLF4J binding in the classpath, found: ${bindings:-none}"
	fi
	[[ -f "$work/lib/kafka_2.13-$KAFKA_VERSION.jar" ]] ||
		die "kafka_2.13-$KAFKA_VERSION.jar missing after fetch"
	echo "$KAFKA_VERSION" >"$work/lib/.complete"
	rm -rf "$LIB"
	mv "$work/lib" "$LIB"
	rm -rf "$work"
	trap - EXIT
}

# ------------------------------------------------------------------ helpers

JVM_OPTS=(-XX:+UseSerialGC -XX:+ExitOnOutOfMemoryError -XX:TieredStopAtLevel=1
	-Djava.net.preferIPv4Stack=true -Djava.awt.headless=true)

storage_tool() {
	# kafka.tools.StorageTool lives in kafka_2.13 (core) in 4.x; newer
	# versions may move it to kafka-tools.
	# (zip entry names are stored uncompressed, so grep finds them)
	if grep -qaF 'kafka/tools/StorageTool.class' "$LIB/kafka_2.13-$KAFKA_VERSION.jar"; then
		echo kafka.tools.StorageTool
	else
		echo org.apache.kafka.tools.StorageTool
	fi
}

pick_port() {
	# Below the Linux ephemeral range (32768+) so outgoing connections do
	# not take it; retried by start if the bind still loses a race.
	local p
	for _ in $(seq 1 200); do
		p=$((20000 + RANDOM % 12000))
		[[ $p == "${1:-}" ]] && continue
		port_in_use "$p" || { echo "$p"; return 0; }
	done
	die "no free port found"
}

# pid of our running broker, or nothing
broker_pid() {
	local pid
	[[ -f $RUN/pid ]] || return 1
	pid=$(cat "$RUN/pid" 2>/dev/null) || return 1
	[[ $pid =~ ^[0-9]+$ ]] || return 1
	kill -0 "$pid" 2>/dev/null || return 1
	# guard against a recycled pid: it must be our java with our config
	tr '\0' ' ' <"/proc/$pid/cmdline" 2>/dev/null | grep -qF "$RUN/server.properties" || return 1
	echo "$pid"
}

log_tail() {
	local f=$RUN/logs/broker.out
	[[ -f $f ]] || return 0
	log "---- last lines of $f ----"
	tail -n 60 "$f" >&2
}

# Metadata lists the broker and a produce/consume round trip succeeds.
broker_ready() {
	local addr=$1 port=${1##*:} md token got
	if command -v kcat >/dev/null; then
		md=$(timeout 10 kcat -b "$addr" -L -m 3 2>/dev/null) || return 1
		grep -q "broker 1 at 127.0.0.1:$port" <<<"$md" || return 1
		token="ready-$$-$RANDOM"
		printf '%s\n' "$token" | timeout 15 kcat -b "$addr" -P -t pacer-ready \
			-X message.timeout.ms=10000 >/dev/null 2>&1 || return 1
		got=$(timeout 15 kcat -b "$addr" -C -t pacer-ready -o beginning -e -q 2>/dev/null) || return 1
		grep -qxF "$token" <<<"$got"
	else
		# Without kcat (scripts/test-env.sh installs it): the port answers
		# and the server logged that it started.
		port_in_use "$port" && grep -q 'Kafka Server started' "$RUN/logs/broker.out" 2>/dev/null
	fi
}

# The SASL_SSL listener takes the user "pacer" and the SSL one the client
# certificate: both serve Metadata (kcat; without it the ports answer).
# kcat checks PLAIN: its SCRAM (librdkafka 2.0.2) is refused by this broker
# where franz-go's is accepted, so the SCRAM users are checked by the Go
# tests (cmd/pacer TestSecureKafka*).
secure_ready() {
	local sasl=$1 mtls=$2
	if command -v kcat >/dev/null; then
		timeout 10 kcat -b "$sasl" -L -m 3 -X security.protocol=SASL_SSL \
			-X sasl.mechanisms=PLAIN -X sasl.username=pacer \
			-X "sasl.password=$(cat "$RUN/sasl/password")" \
			-X "ssl.ca.location=$RUN/tls/ca.pem" >/dev/null 2>&1 || return 1
		timeout 10 kcat -b "$mtls" -L -m 3 -X security.protocol=SSL \
			-X "ssl.ca.location=$RUN/tls/ca.pem" \
			-X "ssl.certificate.location=$RUN/tls/client.pem" \
			-X "ssl.key.location=$RUN/tls/client.key" >/dev/null 2>&1
	else
		port_in_use "${sasl##*:}" && port_in_use "${mtls##*:}"
	fi
}

kill_broker() {
	local pid=$1
	kill -TERM "$pid" 2>/dev/null || return 0
	for _ in $(seq 1 300); do
		kill -0 "$pid" 2>/dev/null || return 0
		sleep 0.1
	done
	log "broker $pid did not stop in 30 s: SIGKILL"
	kill -KILL "$pid" 2>/dev/null || true
	for _ in $(seq 1 50); do
		kill -0 "$pid" 2>/dev/null || return 0
		sleep 0.1
	done
}

# ------------------------------------------------------------------ start

start_once() {
	local bport cport sport mport cid pid addr tool deadline password
	bport=$(pick_port)
	cport=$(pick_port "$bport")
	sport=$(pick_port "$cport")
	mport=$(pick_port "$sport")
	[[ $bport != "$sport" && $bport != "$mport" && $cport != "$mport" ]] || return 2
	addr="127.0.0.1:$bport"
	rm -rf "$RUN/data" "$RUN/logs" "$RUN/bootstrap" "$RUN/pid" "$RUN/env" "$RUN/sasl"
	mkdir -p "$RUN/data" "$RUN/logs" "$RUN/sasl"
	chmod 700 "$RUN/sasl"
	"$ROOT/scripts/certs.sh" "$RUN/tls"
	# Letters and digits only: it goes into a JAAS line and a SCRAM option.
	password=$(head -c 48 /dev/urandom | base64 | tr -dc 'A-Za-z0-9' | head -c 24)
	(umask 077 && printf '%s' "$password" >"$RUN/sasl/password")
	cat >"$RUN/server.properties" <<EOF
process.roles=broker,controller
node.id=1
controller.quorum.voters=1@127.0.0.1:$cport
listeners=PLAINTEXT://127.0.0.1:$bport,CONTROLLER://127.0.0.1:$cport,SASL_SSL://127.0.0.1:$sport,SSL://127.0.0.1:$mport
advertised.listeners=PLAINTEXT://127.0.0.1:$bport,SASL_SSL://127.0.0.1:$sport,SSL://127.0.0.1:$mport
inter.broker.listener.name=PLAINTEXT
controller.listener.names=CONTROLLER
listener.security.protocol.map=PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT,SASL_SSL:SASL_SSL,SSL:SSL
sasl.enabled.mechanisms=PLAIN,SCRAM-SHA-256,SCRAM-SHA-512
listener.name.sasl_ssl.plain.sasl.jaas.config=org.apache.kafka.common.security.plain.PlainLoginModule required user_pacer="$password";
listener.name.sasl_ssl.scram-sha-256.sasl.jaas.config=org.apache.kafka.common.security.scram.ScramLoginModule required;
listener.name.sasl_ssl.scram-sha-512.sasl.jaas.config=org.apache.kafka.common.security.scram.ScramLoginModule required;
ssl.keystore.type=PEM
ssl.keystore.location=$RUN/tls/server-keystore.pem
ssl.truststore.type=PEM
ssl.truststore.location=$RUN/tls/ca.pem
listener.name.ssl.ssl.client.auth=required
log.dirs=$RUN/data
num.partitions=1
default.replication.factor=1
min.insync.replicas=1
offsets.topic.replication.factor=1
offsets.topic.num.partitions=1
transaction.state.log.replication.factor=1
transaction.state.log.min.isr=1
transaction.state.log.num.partitions=1
share.coordinator.state.topic.replication.factor=1
share.coordinator.state.topic.min.isr=1
group.initial.rebalance.delay.ms=0
auto.create.topics.enable=true
num.network.threads=2
num.io.threads=2
EOF
	chmod 600 "$RUN/server.properties" # the PLAIN user's password
	cat >"$RUN/log4j2.properties" <<'EOF'
status = warn
appender.console.type = Console
appender.console.name = STDOUT
appender.console.layout.type = PatternLayout
appender.console.layout.pattern = [%d] %p %m (%c)%n
rootLogger.level = WARN
rootLogger.appenderRef.stdout.ref = STDOUT
logger.raft.name = kafka.server.KafkaRaftServer
logger.raft.level = INFO
EOF
	local jvm=("${JVM_OPTS[@]}" "-Dkafka.logs.dir=$RUN/logs"
		"-Dlog4j2.configurationFile=$RUN/log4j2.properties")
	# 16 random bytes, URL-safe base64; one starting with "-" would read as
	# an option to the storage tool, so draw again.
	cid=-
	while [[ $cid == -* ]]; do
		cid=$(head -c 16 /dev/urandom | base64 | tr '+/' '-_' | tr -d '=\n')
	done
	tool=$(storage_tool)
	if ! java -Xmx256m "${jvm[@]}" -cp "$LIB/*" "$tool" format -t "$cid" \
		-c "$RUN/server.properties" \
		--add-scram "SCRAM-SHA-256=[name=pacer,password=$password]" \
		--add-scram "SCRAM-SHA-512=[name=pacer,password=$password]" \
		</dev/null >"$RUN/logs/format.out" 2>&1; then
		cat "$RUN/logs/format.out" >&2
		die "storage format failed"
	fi
	# Detached from this shell: own session, no inherited fds (the lock on
	# fd 9 and any pipe of a caller capturing our stdout must not leak).
	# shellcheck disable=SC2086,SC2016
	nohup setsid bash -c 'echo $$ >"$1"; shift; exec "$@"' _ "$RUN/pid" \
		java $HEAP "${jvm[@]}" -cp "$LIB/*" kafka.Kafka "$RUN/server.properties" \
		</dev/null >"$RUN/logs/broker.out" 2>&1 9>&- &
	for _ in $(seq 1 50); do [[ -s $RUN/pid ]] && break; sleep 0.1; done
	pid=$(cat "$RUN/pid")
	# interrupted while waiting: do not leave a half-started broker behind
	# shellcheck disable=SC2064
	trap "kill_broker $pid; exit 130" INT TERM HUP
	deadline=$((SECONDS + READY_TIMEOUT))
	while ((SECONDS < deadline)); do
		if ! kill -0 "$pid" 2>/dev/null; then
			if grep -q 'Address already in use' "$RUN/logs/broker.out" 2>/dev/null; then
				return 2 # lost a port race: retry with other ports
			fi
			log_tail
			die "broker exited during start-up"
		fi
		if broker_ready "$addr" && secure_ready "127.0.0.1:$sport" "127.0.0.1:$mport"; then
			trap - INT TERM HUP
			cat >"$RUN/env" <<ENV
export PACER_TEST_KAFKA_SASL_BROKERS=127.0.0.1:$sport
export PACER_TEST_KAFKA_MTLS_BROKERS=127.0.0.1:$mport
export PACER_TEST_KAFKA_CA=$RUN/tls/ca.pem
export PACER_TEST_KAFKA_CLIENT_CERT=$RUN/tls/client.pem
export PACER_TEST_KAFKA_CLIENT_KEY=$RUN/tls/client.key
export PACER_TEST_KAFKA_SASL_USERNAME=pacer
export PACER_TEST_KAFKA_SASL_PASSWORD_FILE=$RUN/sasl/password
ENV
			echo "$addr" >"$RUN/bootstrap"
			echo "$addr"
			return 0
		fi
		sleep 0.5
	done
	log_tail
	kill_broker "$pid"
	die "broker not ready within ${READY_TIMEOUT}s"
}

start() {
	mkdir -p "$RUN"
	exec 9>"$RUN.lock"
	flock -w 600 9 || die "timed out waiting for another kafka.sh start"
	if broker_pid >/dev/null && [[ -s $RUN/bootstrap ]]; then
		cat "$RUN/bootstrap"
		return 0
	fi
	# a dead or foreign broker's leftovers
	if pid=$(broker_pid); then kill_broker "$pid"; fi
	fetch
	local attempt rc
	for attempt in 1 2 3; do
		rc=0
		start_once || rc=$?
		[[ $rc -eq 2 ]] || return "$rc"
		log "port taken, retrying ($attempt)"
	done
	die "could not bind free ports"
}

stop() {
	local pid
	if pid=$(broker_pid); then
		kill_broker "$pid"
	fi
	rm -f "$RUN/pid" "$RUN/bootstrap" "$RUN/env"
}

# down stops the broker and keeps its configuration, data and address for
# up: an outage of a length the caller chooses.
down() {
	local pid
	[[ -s $RUN/server.properties && -s $RUN/bootstrap ]] || die "no broker in $RUN to stop (start it first)"
	if pid=$(broker_pid); then kill_broker "$pid"; fi
	rm -f "$RUN/pid"
}

# up starts the broker that down stopped on the same ports and data (no
# format) and waits until it serves Metadata; already running: prints its
# address.
up() {
	local pid addr jvm deadline
	[[ -s $RUN/server.properties && -s $RUN/bootstrap ]] || die "no broker in $RUN to start again (start it first)"
	addr=$(cat "$RUN/bootstrap")
	if broker_pid >/dev/null; then
		echo "$addr"
		return 0
	fi
	jvm=("${JVM_OPTS[@]}" "-Dkafka.logs.dir=$RUN/logs" "-Dlog4j2.configurationFile=$RUN/log4j2.properties")
	rm -f "$RUN/pid"
	# shellcheck disable=SC2086,SC2016
	nohup setsid bash -c 'echo $$ >"$1"; shift; exec "$@"' _ "$RUN/pid" \
		java $HEAP "${jvm[@]}" -cp "$LIB/*" kafka.Kafka "$RUN/server.properties" \
		</dev/null >>"$RUN/logs/broker.out" 2>&1 9>&- &
	for _ in $(seq 1 50); do [[ -s $RUN/pid ]] && break; sleep 0.1; done
	pid=$(cat "$RUN/pid")
	deadline=$((SECONDS + READY_TIMEOUT))
	while ((SECONDS < deadline)); do
		kill -0 "$pid" 2>/dev/null || { log_tail; die "broker exited while starting again"; }
		if broker_ready "$addr"; then
			echo "$addr"
			return 0
		fi
		sleep 0.5
	done
	log_tail
	die "broker not ready within ${READY_TIMEOUT}s of starting again"
}

# restart stops the broker and starts it again on the same ports and data
# (no format): what a rolling restart looks like to clients.
restart() {
	down
	up
}

case "${1:-}" in
fetch) fetch ;;
start) start ;;
stop) stop ;;
down) down ;;
up) up ;;
env) env_lines broker_pid broker ;;
restart) restart ;;
status) server_status broker_pid bootstrap ;;
*)
	echo "usage: $0 {fetch|start|stop|down|up|restart|status|env}" >&2
	exit 2
	;;
esac
