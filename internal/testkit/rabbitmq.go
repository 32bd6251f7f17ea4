package testkit

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"
)

// The tests run against the machine's RabbitMQ on 127.0.0.1:5672
// (guest/guest), each in a virtual host of its own: a test can declare and
// miss exchanges freely, close its connections, and share the broker with
// other packages and other people's runs.

// BrokerAddr is the machine's RabbitMQ.
const BrokerAddr = "127.0.0.1:5672"

// RequireBroker ends the test unless RabbitMQ answers on BrokerAddr and
// rabbitmqctl is installed (the tests make their virtual hosts with it).
func RequireBroker(tb testing.TB) {
	tb.Helper()
	c, err := net.DialTimeout("tcp", BrokerAddr, 2*time.Second)
	if err != nil {
		Missing(tb, "RabbitMQ is not reachable on %s (%v): apt-get install rabbitmq-server, and start it (rabbitmq-server -detached)", BrokerAddr, err)
	}
	c.Close()
	LookPath(tb, "rabbitmqctl", "rabbitmq-server")
}

// Rabbitmqctl runs rabbitmqctl with args and answers its output. A failure
// is tried again for up to two minutes, since another run may be restarting
// the broker (it holds the broker lock exclusively meanwhile, see
// HoldBrokerShared); then it fails the test. Each try is stopped after 90 s,
// together with the Erlang VM rabbitmqctl's wrapper starts (see ctlCommand):
// a VM left behind would keep one of the CLI's few distribution ports, and a
// handful of them make every later rabbitmqctl fail.
func Rabbitmqctl(tb testing.TB, args ...string) string {
	tb.Helper()
	out, err := rabbitmqctlRetry(2*time.Minute, args...)
	if err != nil {
		tb.Fatalf("rabbitmqctl %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	return out
}

func rabbitmqctlRetry(limit time.Duration, args ...string) (string, error) {
	deadline := time.Now().Add(limit)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
		out, err := ctlCommand(ctx, "rabbitmqctl", args...).CombinedOutput()
		cancel()
		if err == nil || time.Now().After(deadline) {
			return string(out), err
		}
		time.Sleep(2 * time.Second)
	}
}

// Vhost is a RabbitMQ virtual host of one test, guest allowed everything in
// it: nothing another test publishes reaches it, and closing its connections
// touches no one else's.
type Vhost struct {
	Name string
	// Addr is the broker's host:port; empty: the machine's (BrokerAddr).
	// CloseConnections and the rabbitmqctl-based methods reach the
	// machine's broker only.
	Addr string
}

func (v *Vhost) addr() string {
	if v.Addr == "" {
		return BrokerAddr
	}
	return v.Addr
}

// VhostByName answers the Vhost of an existing virtual host (a child
// process's, handed down by name).
func VhostByName(name string) *Vhost { return &Vhost{Name: name} }

// URL answers the AMQP URL of the virtual host, as guest.
func (v *Vhost) URL() string {
	return "amqp://guest:guest@" + v.addr() + "/" + url.PathEscape(v.Name)
}

// OsloURL answers the oslo.messaging transport URL of the virtual host.
func (v *Vhost) OsloURL() string {
	return "rabbit://guest:guest@" + v.addr() + "/" + url.PathEscape(v.Name)
}

// Conn opens a connection to the virtual host, closed when the test ends.
func (v *Vhost) Conn(tb testing.TB) *amqp.Connection {
	tb.Helper()
	c, err := amqp.DialConfig(v.URL(), amqp.Config{Properties: amqp.Table{"connection_name": "tally-test"}})
	if err != nil {
		tb.Fatalf("dial %s: %v", v.Name, err)
	}
	tb.Cleanup(func() { c.Close() })
	return c
}

// channel opens a connection to the vhost (see Conn) and a channel on it;
// the caller closes the connection.
func (v *Vhost) channel(tb testing.TB) (*amqp.Connection, *amqp.Channel) {
	tb.Helper()
	c := v.Conn(tb)
	ch, err := c.Channel()
	if err != nil {
		tb.Fatal(err)
	}
	return c, ch
}

// DeclareExchanges declares topic exchanges as oslo does (not durable unless
// asked).
func (v *Vhost) DeclareExchanges(tb testing.TB, durable bool, names ...string) {
	tb.Helper()
	c, ch := v.channel(tb)
	defer c.Close()
	for _, n := range names {
		if err := ch.ExchangeDeclare(n, amqp.ExchangeTopic, durable, false, false, false, nil); err != nil {
			tb.Fatalf("declare exchange %s: %v", n, err)
		}
	}
}

// Publish sends raw bodies with oslo's properties and waits for the
// broker's confirmation of each.
func (v *Vhost) Publish(tb testing.TB, exchange, key string, bodies ...[]byte) {
	tb.Helper()
	c, ch := v.channel(tb)
	defer c.Close()
	if err := ch.Confirm(false); err != nil {
		tb.Fatal(err)
	}
	for _, b := range bodies {
		dc, err := ch.PublishWithDeferredConfirm(exchange, key, false, false, amqp.Publishing{
			ContentType: "application/json", ContentEncoding: "utf-8", DeliveryMode: amqp.Persistent,
			Headers: amqp.Table{}, Body: b,
		})
		if err != nil {
			tb.Fatal(err)
		}
		if !dc.Wait() {
			tb.Fatal("publish not confirmed")
		}
	}
}

// QueueState answers the number of ready messages of a queue and whether it
// exists (a passive declare, so it costs no rabbitmqctl call).
func (v *Vhost) QueueState(tb testing.TB, queue string) (ready int, exists bool) {
	tb.Helper()
	c, err := amqp.Dial(v.URL())
	if err != nil {
		tb.Fatal(err)
	}
	defer c.Close()
	ch, err := c.Channel()
	if err != nil {
		tb.Fatal(err)
	}
	q, err := ch.QueueDeclarePassive(queue, false, false, false, false, nil)
	var ae *amqp.Error
	if errors.As(err, &ae) && ae.Code == amqp.NotFound {
		return 0, false
	}
	if err != nil {
		tb.Fatal(err)
	}
	return q.Messages, true
}

// QueueCounts is what the broker reports of a queue.
type QueueCounts struct {
	Ready, Unacked, Consumers int
}

// QueueCounts asks the broker (rabbitmqctl) for a queue's counts; ok is
// false when the virtual host has no such queue.
func (v *Vhost) QueueCounts(tb testing.TB, queue string) (counts QueueCounts, ok bool) {
	tb.Helper()
	out := Rabbitmqctl(tb, "list_queues", "-q", "--no-table-headers", "-p", v.Name,
		"name", "messages_ready", "messages_unacknowledged", "consumers")
	for _, line := range strings.Split(out, "\n") {
		f := strings.Fields(line)
		if len(f) != 4 || f[0] != queue {
			continue
		}
		r, err1 := strconv.Atoi(f[1])
		u, err2 := strconv.Atoi(f[2])
		c, err3 := strconv.Atoi(f[3])
		if err1 != nil || err2 != nil || err3 != nil {
			tb.Fatalf("list_queues said %q", line)
		}
		return QueueCounts{Ready: r, Unacked: u, Consumers: c}, true
	}
	return QueueCounts{}, false
}

// Bindings lists "exchange routing_key" of every binding to queue.
func (v *Vhost) Bindings(tb testing.TB, queue string) []string {
	tb.Helper()
	out := Rabbitmqctl(tb, "list_bindings", "-q", "--no-table-headers", "-p", v.Name,
		"source_name", "destination_name", "routing_key")
	var res []string
	for _, line := range strings.Split(out, "\n") {
		f := strings.Split(line, "\t")
		if len(f) == 3 && f[1] == queue && f[0] != "" {
			res = append(res, f[0]+" "+f[2])
		}
	}
	return res
}

// CloseConnections makes the broker close every connection to the virtual
// host, as an operator or a failing node would.
func (v *Vhost) CloseConnections(tb testing.TB, reason string) {
	tb.Helper()
	Rabbitmqctl(tb, "close_all_connections", "-p", v.Name, reason)
}

// NewVhost hands the test a virtual host of its own, and holds the broker
// lock shared until the test ends (HoldBrokerShared). The hosts are made in
// batches, one rabbitmqctl call for each (a call costs a second or more),
// and removed together when the package's tests end: a package that uses
// NewVhost runs its tests through Main.
func NewVhost(tb testing.TB) *Vhost {
	tb.Helper()
	RequireBroker(tb)
	HoldBrokerShared(tb)
	name, err := vhosts.get()
	if err != nil {
		tb.Fatalf("creating test virtual hosts: %v", err)
	}
	return &Vhost{Name: name}
}

// Main runs the package's tests (m.Run) and then removes the virtual hosts
// NewVhost made and stops the TLS nodes RabbitMQTLS started; it answers the
// exit code. A package's TestMain calls
// os.Exit(testkit.Main(m)).
func Main(m *testing.M) int {
	code := m.Run()
	vhosts.drop()
	stopTLSBroker()
	return code
}

// holdBrokerSharedNoTest holds the broker lock shared outside a test (for
// the removal of the virtual hosts after the package's tests) and answers
// its release; ok is false when the lock could not be had.
func holdBrokerSharedNoTest() (release func(), ok bool) {
	brokerLock.Lock()
	defer brokerLock.Unlock()
	if brokerLock.exclusive || brokerLock.shared > 0 {
		return func() {}, true
	}
	t, err := flockPath(brokerTurnstilePath(), syscall.LOCK_EX)
	if err != nil {
		return nil, false
	}
	unflock(t)
	f, err := flockPath(brokerLockPath(), syscall.LOCK_SH)
	if err != nil {
		return nil, false
	}
	return func() { unflock(f) }, true
}

const vhostBatch = 12

// vhostSupply is this process's supply of virtual hosts.
type vhostSupply struct {
	sync.Mutex
	prefix string
	made   []string
	free   []string
}

var vhosts vhostSupply

func (p *vhostSupply) get() (string, error) {
	p.Lock()
	defer p.Unlock()
	if len(p.free) == 0 {
		if p.prefix == "" {
			p.prefix = fmt.Sprintf("tally-test-%d-%d-", os.Getpid(), time.Now().UnixNano()%1e6)
		}
		batch := make([]string, vhostBatch)
		for i := range batch {
			batch[i] = fmt.Sprintf("%s%03d", p.prefix, len(p.made)+i)
		}
		if err := addVhosts(batch); err != nil {
			return "", err
		}
		p.made = append(p.made, batch...)
		p.free = batch
	}
	name := p.free[0]
	p.free = p.free[1:]
	return name, nil
}

func (p *vhostSupply) drop() {
	p.Lock()
	defer p.Unlock()
	if len(p.made) == 0 {
		return
	}
	// Not while another run restarts the broker: a virtual host deleted
	// while the broker stops can keep it from starting again.
	if release, ok := holdBrokerSharedNoTest(); ok {
		defer release()
	}
	expr := `lists:foreach(fun(V) -> rabbit_vhost:delete(V, <<"tally-tests">>) end, ` + ErlBinaries(p.made) + `).`
	if _, err := rabbitmqctlRetry(time.Minute, "eval", expr); err != nil {
		for _, n := range p.made {
			_, _ = rabbitmqctlRetry(0, "delete_vhost", n)
		}
	}
	p.made, p.free = nil, nil
}

// addVhosts makes the virtual hosts, guest allowed everything in each, in
// one rabbitmqctl eval, or with the documented commands where eval fails.
func addVhosts(names []string) error {
	expr := `lists:foreach(fun(V) -> ok = rabbit_vhost:add(V, <<"tally-tests">>), ` +
		`ok = rabbit_auth_backend_internal:set_permissions(<<"guest">>, V, <<".*">>, <<".*">>, <<".*">>, <<"tally-tests">>) end, ` +
		ErlBinaries(names) + `), ok.`
	if out, err := rabbitmqctlRetry(time.Minute, "eval", expr); err == nil && strings.TrimSpace(out) == "ok" {
		return nil
	}
	for _, n := range names {
		if out, err := rabbitmqctlRetry(time.Minute, "add_vhost", n); err != nil {
			return fmt.Errorf("add_vhost %s: %w: %s", n, err, out)
		}
		if out, err := rabbitmqctlRetry(time.Minute, "set_permissions", "-p", n, "guest", ".*", ".*", ".*"); err != nil {
			return fmt.Errorf("set_permissions %s: %w: %s", n, err, out)
		}
	}
	return nil
}

// ErlBin is s as an Erlang binary literal, for rabbitmqctl eval.
func ErlBin(s string) string {
	return `<<"` + strings.NewReplacer(`\`, `\\`, `"`, `\"`).Replace(s) + `">>`
}

// ErlBinaries is a list of Erlang binary literals.
func ErlBinaries(names []string) string {
	q := make([]string, len(names))
	for i, n := range names {
		q[i] = ErlBin(n)
	}
	return "[" + strings.Join(q, ", ") + "]"
}

// The broker lock. A test that stops or restarts the machine's RabbitMQ
// takes it exclusively; every test that uses the broker (NewVhost) holds it
// shared while it runs. A restart deletes the non-durable exchanges oslo
// declares and closes every connection, so a test that counts messages
// cannot run across one; with the lock, a restart waits for the tests
// running then (in every package and every run on the machine) and the next
// ones wait for the broker to be back. It is a file lock (flock), so it
// holds across processes, and this process's holds are counted so that the
// exclusive holder's own vhost does not wait for itself.
//
// Shared holders come and go all the time (several packages, several runs),
// so a second file, the turnstile, gives the restart its turn: a shared
// holder passes through the turnstile (takes it and lets go) before it
// takes the lock, and the restart holds the turnstile while it waits for the
// lock, so no new shared holder gets in before it.
var brokerLock struct {
	sync.Mutex
	f         *os.File
	shared    int
	exclusive bool
}

func brokerLockPath() string { return filepath.Join(os.TempDir(), "tally-osc-broker.lock") }

func brokerTurnstilePath() string { return filepath.Join(os.TempDir(), "tally-osc-broker.turnstile") }

// flockPath opens path and takes the flock how on it.
func flockPath(path string, how int) (*os.File, error) {
	f, err := os.OpenFile(path, os.O_CREATE|os.O_RDWR, 0o666)
	if err != nil {
		return nil, err
	}
	if err := syscall.Flock(int(f.Fd()), how); err != nil {
		f.Close()
		return nil, err
	}
	return f, nil
}

// flockFile is flockPath failing the test on an error.
func flockFile(tb testing.TB, path string, how int) *os.File {
	tb.Helper()
	f, err := flockPath(path, how)
	if err != nil {
		tb.Fatalf("broker lock: %v", err)
	}
	return f
}

func unflock(f *os.File) {
	_ = syscall.Flock(int(f.Fd()), syscall.LOCK_UN)
	f.Close()
}

// HoldBrokerShared holds the broker lock shared until the test ends.
func HoldBrokerShared(tb testing.TB) {
	tb.Helper()
	brokerLock.Lock()
	defer brokerLock.Unlock()
	if brokerLock.exclusive {
		return // this process holds it exclusively: the restarting test itself
	}
	if brokerLock.shared == 0 {
		unflock(flockFile(tb, brokerTurnstilePath(), syscall.LOCK_EX))
		brokerLock.f = flockFile(tb, brokerLockPath(), syscall.LOCK_SH)
	}
	brokerLock.shared++
	tb.Cleanup(func() {
		brokerLock.Lock()
		defer brokerLock.Unlock()
		brokerLock.shared--
		if brokerLock.shared == 0 {
			unflock(brokerLock.f)
			brokerLock.f = nil
		}
	})
}

// LockBrokerExclusive takes the broker lock exclusively, waiting for every
// test that holds it shared, and answers its release (also called when the
// test ends). Call it before NewVhost: a test of this process that holds the
// lock shared would never let go.
func LockBrokerExclusive(tb testing.TB) (unlock func()) {
	tb.Helper()
	f := func() *os.File {
		brokerLock.Lock()
		defer brokerLock.Unlock()
		if brokerLock.shared > 0 || brokerLock.exclusive {
			tb.Fatal("broker lock: this process already holds it (take it exclusively before NewVhost, in a test that is not parallel)")
		}
		turnstile := flockFile(tb, brokerTurnstilePath(), syscall.LOCK_EX)
		defer unflock(turnstile)
		f := flockFile(tb, brokerLockPath(), syscall.LOCK_EX)
		brokerLock.f, brokerLock.exclusive = f, true
		return f
	}()
	var once sync.Once
	unlock = func() {
		once.Do(func() {
			brokerLock.Lock()
			defer brokerLock.Unlock()
			unflock(f)
			brokerLock.f, brokerLock.exclusive = nil, false
		})
	}
	tb.Cleanup(unlock)
	return unlock
}

// ctlCommand runs a CLI tool and, when ctx ends, kills it with every process
// it started: rabbitmqctl is a shell wrapper around su, which starts the
// Erlang VM in a session of its own, so neither killing the wrapper nor its
// process group would reach the VM.
func ctlCommand(ctx context.Context, name string, args ...string) *exec.Cmd {
	cmd := exec.CommandContext(ctx, name, args...)
	cmd.Cancel = func() error { return killTree(cmd.Process.Pid) }
	cmd.WaitDelay = 5 * time.Second
	return cmd
}

// killTree kills pid and all its descendants, children first found from
// /proc, so none is orphaned before it is killed.
func killTree(pid int) error {
	children := processChildren()
	var kill func(int)
	kill = func(p int) {
		_ = syscall.Kill(p, syscall.SIGSTOP) // no new children while we look
		for _, c := range children[p] {
			kill(c)
		}
		_ = syscall.Kill(p, syscall.SIGKILL)
	}
	kill(pid)
	return nil
}

// signalTree sends sig to pid and all its descendants, found from /proc.
func signalTree(pid int, sig syscall.Signal) {
	children := processChildren()
	var send func(int)
	send = func(p int) {
		_ = syscall.Kill(p, sig)
		for _, c := range children[p] {
			send(c)
		}
	}
	send(pid)
}

// processChildren maps each process of the machine to its children, read
// from /proc.
func processChildren() map[int][]int {
	children := map[int][]int{}
	stats, _ := filepath.Glob("/proc/[0-9]*/stat")
	for _, f := range stats {
		b, err := os.ReadFile(f)
		if err != nil {
			continue
		}
		// pid (comm) state ppid ...: comm may hold spaces, so read after ')'.
		i := bytes.LastIndexByte(b, ')')
		if i < 0 {
			continue
		}
		var self, ppid int
		var state string
		if _, err := fmt.Sscanf(string(b[:bytes.IndexByte(b, ' ')]), "%d", &self); err != nil {
			continue
		}
		if _, err := fmt.Sscanf(string(b[i+1:]), " %s %d", &state, &ppid); err != nil {
			continue
		}
		children[ppid] = append(children[ppid], self)
	}
	return children
}
