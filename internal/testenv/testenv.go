// Package testenv gives Go tests the addresses of real servers: a
// redis-server and an Apache Kafka broker (KRaft, single node); WaitFor
// polls for what a test waits on from them.
//
// Order of resolution:
//
//   - Redis: $PACER_TEST_REDIS_ADDR if set, else a private redis-server
//     started once per test binary on a free 127.0.0.1 port.
//   - Kafka: $PACER_TEST_KAFKA_BROKERS if set, else (build tag
//     "testcontainers" and a Docker engine answering) a container, else
//     scripts/kafka.sh start (a broker shared by all test binaries of the
//     work tree, left running afterwards: stop it with scripts/kafka.sh stop).
//
// `make test` starts both servers and sets the two variables. Without a
// server the helpers fail the test with a hint. Under -short they start no
// Kafka broker, Redis Cluster or browser: a test that needs one whose
// variable is unset is skipped, saying so.
//
// Packages that call RedisAddr should stop the private server at exit:
//
//	func TestMain(m *testing.M) { os.Exit(testenv.Main(m)) }
//
// Without Main the private redis-server still dies with the test binary (on
// Linux through Pdeathsig), but its temporary directory stays behind.
package testenv

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// Environment variables read by this package.
const (
	EnvRedisAddr    = "PACER_TEST_REDIS_ADDR"
	EnvKafkaBrokers = "PACER_TEST_KAFKA_BROKERS"
)

const hint = "run `make test` (it starts Redis and Kafka and sets " +
	EnvRedisAddr + " and " + EnvKafkaBrokers + "), or set the variables yourself"

// ---------------------------------------------------------------- Redis

var (
	redisOnce sync.Once
	redisAddr string
	redisErr  error
	redisSrv  *child
	redisDir  string
)

// RedisAddr returns "host:port" of a real redis-server.
func RedisAddr(t testing.TB) string {
	t.Helper()
	if a := strings.TrimSpace(os.Getenv(EnvRedisAddr)); a != "" {
		return a
	}
	redisOnce.Do(func() { redisAddr, redisErr = startRedis() })
	if redisErr != nil {
		t.Fatalf("testenv: no Redis: %v\n%s", redisErr, hint)
	}
	return redisAddr
}

// RedisDB is the database the tests use on the server of RedisAddr, so
// that a server shared with the CLI (make servers, database 0) keeps the
// tests' keys apart; `redis-cli -n 9 flushdb` clears them.
const RedisDB = 9

// RedisURL returns "redis://host:port/9" (database [RedisDB]) for the
// server of RedisAddr.
func RedisURL(t testing.TB) string {
	t.Helper()
	return "redis://" + RedisAddr(t) + "/" + strconv.Itoa(RedisDB)
}

func startRedis() (string, error) {
	bin, err := exec.LookPath("redis-server")
	if err != nil {
		return "", fmt.Errorf("%s is not set and redis-server is not installed (apt-get install redis-server)", EnvRedisAddr)
	}
	dir, err := os.MkdirTemp("", "pacer-testenv-redis-")
	if err != nil {
		return "", err
	}
	redisDir = dir
	var lastErr error
	for attempt := 0; attempt < 5; attempt++ {
		port, err := freePort()
		if err != nil {
			return "", err
		}
		addr, err := tryRedis(bin, dir, port)
		if err == nil {
			return addr, nil
		}
		lastErr = err
	}
	return "", lastErr
}

func tryRedis(bin, dir string, port int) (string, error) {
	addr := net.JoinHostPort("127.0.0.1", strconv.Itoa(port))
	c, err := startChild("redis-server", bin, dir, addr,
		"--port", strconv.Itoa(port),
		"--bind", "127.0.0.1",
		"--save", "",
		"--appendonly", "no",
		"--dir", dir,
		"--daemonize", "no",
		"--protected-mode", "yes",
	)
	if err != nil {
		return "", err
	}
	redisSrv = c
	return addr, nil
}

// child is a server process of the tests' own (redis-server, a sentinel).
type child struct {
	cmd  *exec.Cmd
	done chan struct{} // closed when cmd has exited
}

// startChild runs bin with args in dir and waits, at most 15 s, until the
// server answers PING at addr. The child dies with this process
// (Pdeathsig). On failure it is killed, and the error (named name) carries
// the tail of its output.
func startChild(name, bin, dir, addr string, args ...string) (*child, error) {
	out := SyncBuffer{max: 1 << 20} // keep memory bounded; only the tail matters
	cmd := exec.Command(bin, args...)
	cmd.Dir = dir
	cmd.Stdout, cmd.Stderr = &out, &out
	setPdeathsig(cmd)
	// Pdeathsig fires when the thread that forked the child exits, not the
	// process: start and wait on a locked thread that lives exactly as long
	// as the child.
	started := make(chan error, 1)
	c := &child{cmd: cmd, done: make(chan struct{})}
	go func() {
		runtime.LockOSThread()
		err := cmd.Start()
		started <- err
		if err == nil {
			_ = cmd.Wait()
		}
		close(c.done)
	}()
	if err := <-started; err != nil {
		return nil, fmt.Errorf("start %s: %w", name, err)
	}
	deadline := time.Now().Add(15 * time.Second)
	for time.Now().Before(deadline) {
		select {
		case <-c.done:
			return nil, fmt.Errorf("%s exited early at %s:\n%s", name, addr, tail(out.String(), 20))
		default:
		}
		if redisPing(addr, 500*time.Millisecond) == nil {
			return c, nil
		}
		time.Sleep(20 * time.Millisecond)
	}
	_ = cmd.Process.Kill()
	<-c.done
	return nil, fmt.Errorf("%s on %s did not answer PING within 15s:\n%s", name, addr, tail(out.String(), 20))
}

// stop ends the child: SIGTERM, then SIGKILL after 5 s.
func (c *child) stop() {
	_ = c.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-c.done:
	case <-time.After(5 * time.Second):
		_ = c.cmd.Process.Kill()
		<-c.done
	}
}

// redisPing sends PING in RESP and expects +PONG.
func redisPing(addr string, timeout time.Duration) error {
	c, err := net.DialTimeout("tcp", addr, timeout)
	if err != nil {
		return err
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(timeout))
	if _, err := c.Write([]byte("*1\r\n$4\r\nPING\r\n")); err != nil {
		return err
	}
	line, err := bufio.NewReader(c).ReadString('\n')
	if err != nil {
		return err
	}
	if line != "+PONG\r\n" {
		return fmt.Errorf("unexpected PING reply %q", line)
	}
	return nil
}

func stopRedis() {
	if redisSrv != nil {
		redisSrv.stop()
		redisSrv = nil
	}
	if redisDir != "" {
		_ = os.RemoveAll(redisDir)
		redisDir = ""
	}
}

// ---------------------------------------------------------------- Kafka

var (
	kafkaOnce sync.Once
	kafkaAddr string
	kafkaErr  error
	kafkaNote string // printed by Main when this binary started the shared broker

	// containerKafka is set by testenv_testcontainers.go (build tag
	// testcontainers). It reports ok=false when no Docker engine answers.
	containerKafka func() (addr string, ok bool, err error)
	stopContainers func()
)

// KafkaBrokers returns the comma-separated bootstrap addresses of a real
// Kafka broker. Under -short with $PACER_TEST_KAFKA_BROKERS unset it skips
// the test.
func KafkaBrokers(t testing.TB) string {
	t.Helper()
	if b := strings.TrimSpace(os.Getenv(EnvKafkaBrokers)); b != "" {
		return b
	}
	skipShort(t, "Kafka broker", EnvKafkaBrokers)
	kafkaOnce.Do(func() { kafkaAddr, kafkaErr = startKafka(t) })
	if kafkaErr != nil {
		t.Fatalf("testenv: no Kafka: %v\n%s", kafkaErr, hint)
	}
	return kafkaAddr
}

func startKafka(t testing.TB) (string, error) {
	if containerKafka != nil {
		addr, ok, err := containerKafka()
		if err != nil {
			return "", err
		}
		if ok {
			return addr, nil
		}
	}
	t.Logf("testenv: %s is not set; starting a broker with scripts/kafka.sh start (first run downloads jars)", EnvKafkaBrokers)
	out, err := runScript("kafka.sh", "start", 8*time.Minute)
	if err != nil {
		return "", fmt.Errorf("%s is not set: %w", EnvKafkaBrokers, err)
	}
	addr := lastLine(out)
	if _, _, err := net.SplitHostPort(strings.Split(addr, ",")[0]); err != nil {
		return "", fmt.Errorf("scripts/kafka.sh start printed %q, not host:port", addr)
	}
	kafkaNote = "testenv: the Kafka broker at " + addr + " stays up for later runs; stop it with scripts/kafka.sh stop"
	return addr, nil
}

// runScript runs `bash scripts/<script> <verb>` from the repository root,
// with env ("NAME=value") added to this process's environment, for at most
// timeout, and returns its standard output. An error names the script and
// carries the tails of both outputs.
func runScript(script, verb string, timeout time.Duration, env ...string) (string, error) {
	root, err := RepoRoot()
	if err != nil {
		return "", err
	}
	path := filepath.Join(root, "scripts", script)
	if _, err := os.Stat(path); err != nil {
		return "", fmt.Errorf("%s is missing", path)
	}
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	var stdout, stderr bytes.Buffer
	cmd := exec.CommandContext(ctx, "bash", path, verb)
	cmd.Dir, cmd.Stdout, cmd.Stderr = root, &stdout, &stderr
	cmd.Env = append(os.Environ(), env...)
	if err := cmd.Run(); err != nil {
		return "", fmt.Errorf("scripts/%s %s: %v\n%s%s", script, verb, err, tail(stdout.String(), 10), tail(stderr.String(), 40))
	}
	return stdout.String(), nil
}

// PrivateKafka starts a broker of the test's own with scripts/kafka.sh, in
// a run directory under t.TempDir() (a restart of the shared broker would
// break other tests), stops it when the test ends, and returns its
// bootstrap address and a restart func (stop, then start on the same ports
// and data). A failing script call fails the test with its output.
func PrivateKafka(t testing.TB) (brokers string, restart func()) {
	t.Helper()
	b := PrivateBroker(t)
	return b.Addr, func() { b.Down(); b.Up() }
}

// Broker is a private Kafka broker of one test ([PrivateBroker]).
type Broker struct {
	// Addr is its bootstrap address, host:port, the same after Up.
	Addr string
	t    testing.TB
	run  string // PACER_KAFKA_RUN=<its run directory>
}

// PrivateBroker starts a broker of the test's own as [PrivateKafka] does,
// stopped when the test ends, whose outages the test makes with Down and
// Up.
func PrivateBroker(t testing.TB) *Broker {
	t.Helper()
	b := &Broker{t: t, run: "PACER_KAFKA_RUN=" + t.TempDir()}
	b.Addr = b.kafka("start")
	t.Cleanup(func() { b.kafka("stop") })
	return b
}

// Down stops the broker (SIGTERM, SIGKILL after 30 s) and returns once it
// has exited; its ports and data are kept for Up.
func (b *Broker) Down() { b.t.Helper(); b.kafka("down") }

// Up starts the broker again on the same ports and data and returns once
// it serves Metadata.
func (b *Broker) Up() { b.t.Helper(); b.kafka("up") }

func (b *Broker) kafka(verb string) string {
	b.t.Helper()
	out, err := runScript("kafka.sh", verb, 8*time.Minute, b.run)
	if err != nil {
		b.t.Fatalf("testenv: %v", err)
	}
	return strings.TrimSpace(out)
}

// RepoRoot walks up from the working directory to the directory holding
// go.mod.
func RepoRoot() (string, error) {
	dir, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			return dir, nil
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", errors.New("no go.mod found above the working directory")
		}
		dir = parent
	}
}

// ---------------------------------------------------------------- Main

// Main runs the tests and then stops the servers that this test binary
// started. Use it from TestMain: os.Exit(testenv.Main(m)).
func Main(m *testing.M) int {
	code := m.Run()
	Stop()
	return code
}

// Stop stops the servers started by this process (the private
// redis-server, test containers). The shared Kafka broker of
// scripts/kafka.sh is left running for other test binaries.
func Stop() {
	stopRedis()
	if stopContainers != nil {
		stopContainers()
	}
	if kafkaNote != "" {
		fmt.Fprintln(os.Stderr, kafkaNote)
		kafkaNote = ""
	}
}

// ---------------------------------------------------------------- helpers

// skipShort skips t under -short, which starts none of what, whose
// variable env is unset.
func skipShort(t testing.TB, what, env string) {
	t.Helper()
	if testing.Short() {
		t.Skipf("testenv: -short starts no %s and %s is unset; `make test` runs this test", what, env)
	}
}

func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

func tail(s string, n int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	out := strings.Join(lines, "\n")
	if out != "" {
		out += "\n"
	}
	return out
}

func lastLine(s string) string {
	lines := strings.Split(strings.TrimSpace(s), "\n")
	return strings.TrimSpace(lines[len(lines)-1])
}

// SyncBuffer is a bytes.Buffer safe for concurrent writers, such as a
// test's logger written by several goroutines.
type SyncBuffer struct {
	mu  sync.Mutex
	b   bytes.Buffer
	max int // bytes kept at most (older output dropped); 0: no bound
}

func (s *SyncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.max > 0 && s.b.Len() > s.max {
		s.b.Reset()
	}
	return s.b.Write(p)
}

func (s *SyncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}
