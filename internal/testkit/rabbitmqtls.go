package testkit

import (
	"context"
	"crypto/tls"
	"fmt"
	"io"
	"net"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"
)

// RabbitMQ nodes with TLS listeners, owned by one test process: the
// machine's RabbitMQ (the rabbitmq-server package) started a second and a
// third time under node names, ports, configuration and data of their own in
// a temporary directory. The machine's own broker and the RabbitMQ 4 test
// cluster are left alone: nothing of their configuration changes.
//
// Two nodes, started together once per test process and shared by its TLS
// tests:
//
//   - "optional": verify_peer with fail_if_no_peer_cert = false, so a client
//     without a certificate connects and one with a certificate has it
//     verified and shown (list_connections peer_cert_subject);
//   - "required": fail_if_no_peer_cert = true, the listener of a deployment
//     that demands client certificates.
//
// Both serve a certificate for 127.0.0.1 and localhost signed by the
// process's test CA, and also listen without TLS on loopback so that tests
// can declare and publish as they do on the machine broker. Each node's Erlang
// VM reads its standard input from a pipe this process holds: when the
// process ends, however it ends, the VM reads end-of-file and halts.

// TLSBroker is the pair of TLS nodes of this test process.
type TLSBroker struct {
	// CA signed the nodes' certificate and Client.
	CA *CA
	// Client is a client certificate signed by CA (common name
	// "tally-collector").
	Client Cert
	// Optional and Required are the two nodes.
	Optional, Required *TLSNode
	// Dir holds the CA's files; tests put more certificates beside them.
	Dir string
}

// TLSNode is one node of a TLSBroker.
type TLSNode struct {
	Name      string // Erlang node name
	TLSAddr   string // 127.0.0.1:port of the TLS listener
	PlainAddr string // 127.0.0.1:port of the plain listener
	// CertFile and KeyFile are the files the node serves; SwapCert replaces
	// them.
	CertFile, KeyFile string

	dir   string
	cmd   *exec.Cmd
	stdin io.WriteCloser
	exit  chan struct{}
}

// AMQPS is the node's amqps:// URL for the virtual host vhost ("" is "/").
func (n *TLSNode) AMQPS(vhost string) string {
	return "amqps://guest:guest@" + n.TLSAddr + "/" + url.PathEscape(vhostOrRoot(vhost))
}

// Vhost is the node's default virtual host "/" reached without TLS, for a
// test's own setup (declare, publish). Tests on a node share it: each names
// its exchanges and queues after itself.
func (n *TLSNode) Vhost() *Vhost { return &Vhost{Name: "/", Addr: n.PlainAddr} }

func vhostOrRoot(v string) string {
	if v == "" {
		return "/"
	}
	return v
}

var tlsBroker struct {
	once sync.Once
	b    *TLSBroker
	err  error
}

// tlsNodeStartTimeout bounds a node's boot on a busy machine.
const tlsNodeStartTimeout = 3 * time.Minute

// RabbitMQTLS starts the two TLS nodes on first use in this test process
// and answers them. It fails the test naming the Debian package when
// rabbitmq-server is not installed, and with the node's log when a node does
// not start. testkit.Main stops them after the tests.
func RabbitMQTLS(tb testing.TB) *TLSBroker {
	tb.Helper()
	server := "/usr/lib/rabbitmq/bin/rabbitmq-server"
	if _, err := os.Stat(server); err != nil {
		Missing(tb, "%s is missing: apt-get install rabbitmq-server", server)
	}
	tlsBroker.once.Do(func() { tlsBroker.b, tlsBroker.err = startTLSBroker(tb) })
	if tlsBroker.err != nil {
		tb.Fatalf("RabbitMQ TLS nodes: %v", tlsBroker.err)
	}
	for _, n := range []*TLSNode{tlsBroker.b.Optional, tlsBroker.b.Required} {
		select {
		case <-n.exit:
			tb.Fatalf("RabbitMQ TLS node %s has stopped; %s", n.Name, n.logTail())
		default:
		}
	}
	return tlsBroker.b
}

func startTLSBroker(tb testing.TB) (*TLSBroker, error) {
	dir, err := os.MkdirTemp("", "tally-rabbitmq-tls-")
	if err != nil {
		return nil, err
	}
	b := &TLSBroker{Dir: filepath.Join(dir, "pki")}
	b.CA = NewCA(tb, b.Dir, "tally-test")
	b.Client = b.CA.Issue(tb, "client", "tally-collector", CertOptions{})
	b.Optional = &TLSNode{Name: fmt.Sprintf("tally-tls-optional-%d@localhost", os.Getpid()), dir: filepath.Join(dir, "optional")}
	b.Required = &TLSNode{Name: fmt.Sprintf("tally-tls-required-%d@localhost", os.Getpid()), dir: filepath.Join(dir, "required")}
	// The ports are chosen and bound while this process holds the port
	// lock: another test process choosing at the same moment gets others.
	lock, err := flockPath(filepath.Join(os.TempDir(), "tally-osc-tls-ports.lock"), syscall.LOCK_EX)
	if err != nil {
		return nil, fmt.Errorf("TLS node port lock: %w", err)
	}
	defer unflock(lock)
	ports, err := choosePorts(tlsPortLow, tlsPortHigh, 6)
	if err != nil {
		return nil, err
	}
	pair, err := tls.LoadX509KeyPair(b.Client.CertFile, b.Client.KeyFile)
	if err != nil {
		return nil, err
	}
	// The readiness check asks for RabbitMQ itself on each port, over TLS
	// with this process's CA on the TLS one, not merely for a listener.
	client := &tls.Config{RootCAs: b.CA.Pool(), Certificates: []tls.Certificate{pair}, ServerName: "localhost"}
	var wg sync.WaitGroup
	errs := make([]error, 2)
	for i, n := range []*TLSNode{b.Optional, b.Required} {
		srv := b.CA.Issue(tb, "server-"+filepath.Base(n.dir), "localhost", CertOptions{Hosts: []string{"127.0.0.1", "localhost"}})
		n.CertFile, n.KeyFile = srv.CertFile, srv.KeyFile
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs[i] = n.start(b.CA.CAFile, n == b.Required, [3]int(ports[3*i:3*i+3]), client)
		}()
	}
	wg.Wait()
	for _, err := range errs {
		if err != nil {
			b.stop()
			return nil, err
		}
	}
	tlsBrokerStarted.Lock()
	tlsBrokerStarted.b = b
	tlsBrokerStarted.Unlock()
	return b, nil
}

func (n *TLSNode) env() []string {
	return []string{
		"PATH=/usr/sbin:/usr/bin:/sbin:/bin", "HOME=" + n.dir, "LANG=C.UTF-8", "LC_ALL=C.UTF-8",
		"ERL_EPMD_ADDRESS=127.0.0.1",
		"RABBITMQ_NODENAME=" + n.Name, "RABBITMQ_USE_LONGNAME=false",
		// Not the machine's /etc/rabbitmq/rabbitmq-env.conf, which names its node.
		"RABBITMQ_CONF_ENV_FILE=" + filepath.Join(n.dir, "rabbitmq-env.conf"),
		"RABBITMQ_CONFIG_FILE=" + filepath.Join(n.dir, "rabbitmq.conf"),
		"RABBITMQ_ADVANCED_CONFIG_FILE=" + filepath.Join(n.dir, "advanced.config"),
		"RABBITMQ_ENABLED_PLUGINS_FILE=" + filepath.Join(n.dir, "enabled_plugins"),
		"RABBITMQ_MNESIA_BASE=" + filepath.Join(n.dir, "mnesia"),
		"RABBITMQ_LOG_BASE=" + filepath.Join(n.dir, "log"),
		"RABBITMQ_PID_FILE=" + filepath.Join(n.dir, "node.pid"),
		// rabbitmqctl's own distribution ports: neither the CLI default every
		// other rabbitmqctl on the machine uses nor the RabbitMQ 4 cluster's.
		"RABBITMQ_CTL_DIST_PORT_MIN=25900", "RABBITMQ_CTL_DIST_PORT_MAX=25999",
		"RABBITMQ_CTL_ERL_ARGS=-kernel inet_dist_use_interface {127,0,0,1}",
	}
}

func (n *TLSNode) start(caFile string, required bool, ports [3]int, client *tls.Config) error {
	if err := os.MkdirAll(filepath.Join(n.dir, "log"), 0o755); err != nil {
		return err
	}
	tlsPort, plainPort, distPort := ports[0], ports[1], ports[2]
	n.TLSAddr = fmt.Sprintf("127.0.0.1:%d", tlsPort)
	n.PlainAddr = fmt.Sprintf("127.0.0.1:%d", plainPort)
	conf := fmt.Sprintf(`listeners.tcp.1 = 127.0.0.1:%d
listeners.ssl.1 = 127.0.0.1:%d
ssl_options.cacertfile = %s
ssl_options.certfile = %s
ssl_options.keyfile = %s
ssl_options.verify = verify_peer
ssl_options.fail_if_no_peer_cert = %t
loopback_users.guest = true
vm_memory_high_watermark.absolute = 512MiB
disk_free_limit.absolute = 50MB
log.console = false
log.file.level = info
`, plainPort, tlsPort, caFile, n.CertFile, n.KeyFile, required)
	files := map[string]string{
		"rabbitmq.conf": conf, "rabbitmq-env.conf": "", "enabled_plugins": "[].\n", "advanced.config": "[].\n",
	}
	for name, body := range files {
		if err := os.WriteFile(filepath.Join(n.dir, name), []byte(body), 0o644); err != nil {
			return err
		}
	}
	return n.boot(distPort, func() error { return n.answers(client) })
}

// boot runs the node configured in n.dir with the Erlang distribution on
// distPort and waits until ready answers nil, or the node exits, or
// tlsNodeStartTimeout passes.
func (n *TLSNode) boot(distPort int, ready func() error) error {
	cmd := exec.Command("/usr/lib/rabbitmq/bin/rabbitmq-server")
	cmd.Dir = n.dir
	cmd.Env = append(n.env(),
		fmt.Sprintf("RABBITMQ_DIST_PORT=%d", distPort),
		// The VM runs in the foreground and reads its input from our pipe
		// (see above); no busy-waiting schedulers on a shared machine.
		"RABBITMQ_ALLOW_INPUT=1",
		"RABBITMQ_SERVER_ADDITIONAL_ERL_ARGS=-kernel inet_dist_use_interface {127,0,0,1} +sbwt none +sbwtdcpu none +sbwtdio none")
	console, err := os.Create(filepath.Join(n.dir, "log", "console.log"))
	if err != nil {
		return err
	}
	defer console.Close()
	cmd.Stdout, cmd.Stderr = console, console
	if n.stdin, err = cmd.StdinPipe(); err != nil {
		return err
	}
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("start %s: %w", n.Name, err)
	}
	n.cmd, n.exit = cmd, make(chan struct{})
	go func() { _ = cmd.Wait(); close(n.exit) }()
	deadline := time.Now().Add(tlsNodeStartTimeout)
	for {
		err := ready()
		if err == nil {
			return nil
		}
		select {
		case <-n.exit:
			return fmt.Errorf("node %s exited while starting; %s", n.Name, n.logTail())
		default:
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("node %s not ready after %v: %w; %s", n.Name, tlsNodeStartTimeout, err, n.logTail())
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// answers is nil when the node speaks AMQP on its plain port and AMQP over
// TLS, with a certificate from this process's CA, on its TLS port.
func (n *TLSNode) answers(client *tls.Config) error {
	c, err := amqp.Dial("amqp://guest:guest@" + n.PlainAddr + "/")
	if err != nil {
		return fmt.Errorf("plain listener %s: %w", n.PlainAddr, err)
	}
	c.Close()
	c, err = amqp.DialTLS(n.AMQPS(""), client)
	if err != nil {
		return fmt.Errorf("TLS listener %s: %w", n.TLSAddr, err)
	}
	c.Close()
	return nil
}

// The TLS nodes' ports come from a band below the kernel's ephemeral ports
// (32768-60999 by default): nothing that listens on port 0 or dials out, in
// this process or another, is handed one of them while a node boots, which
// takes seconds. The band is clear of the RabbitMQ 4 cluster's ports
// (4380, 5682-5684, 25682-25684, 25700-25799) and of rabbitmqctl's
// (25900-25999).
const tlsPortLow, tlsPortHigh = 26000, 26999

// choosePorts answers n distinct ports of [low, high] that are free now,
// starting at an offset of this process's: each is bound until all are
// found, then let go for the node to take.
func choosePorts(low, high, n int) ([]int, error) {
	span := high - low + 1
	start := (os.Getpid() * 37) % span
	var ports []int
	var held []net.Listener
	defer func() {
		for _, ln := range held {
			ln.Close()
		}
	}()
	for i := 0; i < span && len(ports) < n; i++ {
		p := low + (start+i)%span
		ln, err := net.Listen("tcp", fmt.Sprintf("127.0.0.1:%d", p))
		if err != nil {
			continue
		}
		held = append(held, ln)
		ports = append(ports, p)
	}
	if len(ports) < n {
		return nil, fmt.Errorf("only %d of %d ports free in %d-%d", len(ports), n, low, high)
	}
	return ports, nil
}

// logTail is the end of the node's console and log files, for a failure.
func (n *TLSNode) logTail() string {
	var b strings.Builder
	paths, _ := filepath.Glob(filepath.Join(n.dir, "log", "*.log"))
	for _, p := range paths {
		data, _ := os.ReadFile(p)
		if len(data) > 3000 {
			data = data[len(data)-3000:]
		}
		fmt.Fprintf(&b, "\n--- %s:\n%s", p, data)
	}
	return "logs:" + b.String()
}

// Ctl runs rabbitmqctl against the node and answers its output; a failure
// fails the test.
func (n *TLSNode) Ctl(tb testing.TB, args ...string) string {
	tb.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	cmd := ctlCommand(ctx, "/usr/lib/rabbitmq/bin/rabbitmqctl", append([]string{"-n", n.Name, "-q"}, args...)...)
	cmd.Env = n.env()
	out, err := cmd.CombinedOutput()
	if err != nil {
		tb.Fatalf("rabbitmqctl -n %s %s: %v\n%s", n.Name, strings.Join(args, " "), err, out)
	}
	return string(out)
}

// serve makes the node serve c from its next TLS connection on: the files
// are replaced and the node's PEM cache cleared, RabbitMQ's way of rotating
// a certificate without a restart.
func (n *TLSNode) serve(tb testing.TB, c Cert) {
	tb.Helper()
	CopyFile(tb, c.KeyFile, n.KeyFile)
	CopyFile(tb, c.CertFile, n.CertFile)
	n.Ctl(tb, "eval", "ssl:clear_pem_cache().")
}

// SwapCert serves c for the rest of the test and the node's own
// certificate again afterwards.
func (n *TLSNode) SwapCert(tb testing.TB, c Cert) {
	tb.Helper()
	own := Cert{CertFile: n.CertFile + ".own", KeyFile: n.KeyFile + ".own"}
	CopyFile(tb, n.CertFile, own.CertFile)
	CopyFile(tb, n.KeyFile, own.KeyFile)
	tb.Cleanup(func() { n.serve(tb, own) })
	n.serve(tb, c)
}

// PeerCertSubjects lists the subjects of the client certificates of the
// node's open connections (empty for a connection without one).
func (n *TLSNode) PeerCertSubjects(tb testing.TB) []string {
	tb.Helper()
	out := n.Ctl(tb, "list_connections", "--no-table-headers", "peer_cert_subject")
	var subjects []string
	for _, l := range strings.Split(out, "\n") {
		if l = strings.TrimSpace(l); l != "" {
			subjects = append(subjects, l)
		}
	}
	return subjects
}

// tlsBrokerStarted is the pair started, for stopTLSBroker.
var tlsBrokerStarted struct {
	sync.Mutex
	b *TLSBroker
}

// stopTLSBroker stops this process's TLS nodes, if it started them.
func stopTLSBroker() {
	tlsBrokerStarted.Lock()
	b := tlsBrokerStarted.b
	tlsBrokerStarted.b = nil
	tlsBrokerStarted.Unlock()
	if b != nil {
		b.stop()
	}
}

// stop closes each node's input (the VM halts) and, should one still run
// after 30 s, kills it; then removes the directory.
func (b *TLSBroker) stop() {
	for _, n := range []*TLSNode{b.Optional, b.Required} {
		if n == nil || n.cmd == nil {
			continue
		}
		_ = n.stdin.Close()
	}
	for _, n := range []*TLSNode{b.Optional, b.Required} {
		if n != nil {
			n.waitHalted()
		}
	}
	_ = os.RemoveAll(filepath.Dir(b.Dir))
}

// waitHalted waits for the node's VM to halt once its input is closed and,
// should it still run after 30 s, kills it.
func (n *TLSNode) waitHalted() {
	if n.cmd == nil {
		return
	}
	select {
	case <-n.exit:
	case <-time.After(30 * time.Second):
		_ = killTree(n.cmd.Process.Pid)
		<-n.exit
	}
}
