package testkit

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"
)

// A RabbitMQ node of one test's own, for what a test must not do to a broker
// other tests share: a resource alarm, which blocks every publishing
// connection of the node. It is the machine's rabbitmq-server started once
// more, as the TLS nodes are (rabbitmqtls.go), with a plain listener on
// loopback only, under a node name, ports, configuration and data of its own;
// it halts when the test ends, and when the test process ends however it
// ends (its VM reads its input from a pipe the process holds).

// Node is a RabbitMQ node of one test.
type Node struct {
	Name string // Erlang node name
	Addr string // 127.0.0.1:port of its AMQP listener

	n *TLSNode
}

// memoryWatermark is the node's configured memory high watermark, which
// ClearMemoryAlarm sets back.
const memoryWatermark = "512MiB"

// RabbitMQNode starts a node for the calling test and stops it, removing its
// files, when the test ends. It fails the test naming the Debian package when
// rabbitmq-server is not installed, and with the node's log when it does not
// start. A start takes some seconds.
func RabbitMQNode(tb testing.TB) *Node {
	tb.Helper()
	server := "/usr/lib/rabbitmq/bin/rabbitmq-server"
	if _, err := os.Stat(server); err != nil {
		Missing(tb, "%s is missing: apt-get install rabbitmq-server", server)
	}
	dir, err := os.MkdirTemp("", "tally-rabbitmq-node-")
	if err != nil {
		tb.Fatal(err)
	}
	tn := &TLSNode{Name: fmt.Sprintf("tally-own-%d-%d@localhost", os.Getpid(), ownNodeSeq.Add(1)), dir: dir}
	tb.Cleanup(func() {
		if tn.stdin != nil {
			_ = tn.stdin.Close()
		}
		tn.waitHalted()
		_ = os.RemoveAll(dir)
	})
	// The ports come from the TLS nodes' band, chosen and bound under the
	// same lock (rabbitmqtls.go).
	lock, err := flockPath(filepath.Join(os.TempDir(), "tally-osc-tls-ports.lock"), syscall.LOCK_EX)
	if err != nil {
		tb.Fatalf("node port lock: %v", err)
	}
	err = func() error {
		defer unflock(lock)
		ports, err := choosePorts(tlsPortLow, tlsPortHigh, 2)
		if err != nil {
			return err
		}
		tn.PlainAddr = fmt.Sprintf("127.0.0.1:%d", ports[0])
		if err := os.MkdirAll(filepath.Join(dir, "log"), 0o755); err != nil {
			return err
		}
		conf := fmt.Sprintf(`listeners.tcp.1 = 127.0.0.1:%d
loopback_users.guest = true
vm_memory_high_watermark.absolute = %s
disk_free_limit.absolute = 50MB
log.console = false
log.file.level = info
`, ports[0], memoryWatermark)
		files := map[string]string{
			"rabbitmq.conf": conf, "rabbitmq-env.conf": "", "enabled_plugins": "[].\n", "advanced.config": "[].\n",
		}
		for name, body := range files {
			if err := os.WriteFile(filepath.Join(dir, name), []byte(body), 0o644); err != nil {
				return err
			}
		}
		return tn.boot(ports[1], func() error {
			c, err := amqp.Dial("amqp://guest:guest@" + tn.PlainAddr + "/")
			if err != nil {
				return err
			}
			return c.Close()
		})
	}()
	if err != nil {
		tb.Fatalf("RabbitMQ node of the test: %v", err)
	}
	return &Node{Name: tn.Name, Addr: tn.PlainAddr, n: tn}
}

// ownNodeSeq numbers the nodes a test process starts.
var ownNodeSeq atomic.Int64

// URL is the node's AMQP URL for its virtual host "/", as guest.
func (n *Node) URL() string { return "amqp://guest:guest@" + n.Addr + "/" }

// Vhost is the node's virtual host "/", for a test's own setup (declare,
// publish). Its rabbitmqctl-based methods reach the machine's broker, not
// the node: use Ctl.
func (n *Node) Vhost() *Vhost { return &Vhost{Name: "/", Addr: n.Addr} }

// Ctl runs rabbitmqctl against the node and answers its output; a failure
// fails the test.
func (n *Node) Ctl(tb testing.TB, args ...string) string {
	tb.Helper()
	return n.n.Ctl(tb, args...)
}

// MemoryAlarm raises a memory alarm on the node, its high watermark set to
// one byte, and waits until the node reports it: from then on the node
// blocks every connection that publishes (it stops reading from its socket).
func (n *Node) MemoryAlarm(tb testing.TB) {
	tb.Helper()
	n.Ctl(tb, "set_vm_memory_high_watermark", "absolute", "1")
	WaitUntil(tb, time.Minute, "the memory alarm of node "+n.Name, func() (bool, string) {
		alarms := n.alarms(tb)
		return len(alarms) > 0, fmt.Sprintf("alarms %v", alarms)
	})
}

// ClearMemoryAlarm sets the node's configured watermark back and waits
// until the alarm has cleared.
func (n *Node) ClearMemoryAlarm(tb testing.TB) {
	tb.Helper()
	n.Ctl(tb, "set_vm_memory_high_watermark", "absolute", memoryWatermark)
	WaitUntil(tb, time.Minute, "the memory alarm of node "+n.Name+" cleared", func() (bool, string) {
		alarms := n.alarms(tb)
		return len(alarms) == 0, fmt.Sprintf("alarms %v", alarms)
	})
}

func (n *Node) alarms(tb testing.TB) []json.RawMessage {
	tb.Helper()
	out := n.Ctl(tb, "status", "--formatter", "json")
	var st struct {
		Alarms []json.RawMessage `json:"alarms"`
	}
	if err := json.Unmarshal([]byte(out), &st); err != nil {
		tb.Fatalf("status of node %s: %v\n%s", n.Name, err, out)
	}
	return st.Alarms
}

// Freeze stops the node's processes (SIGSTOP): from then on the node
// answers nothing, not even heartbeats, as a broker that hangs does; its
// connections stay open. Thaw resumes it, and so does the end of the test.
func (n *Node) Freeze(tb testing.TB) {
	tb.Helper()
	signalTree(n.n.cmd.Process.Pid, syscall.SIGSTOP)
	tb.Cleanup(func() { n.Thaw(tb) })
}

// Thaw resumes a node Freeze stopped.
func (n *Node) Thaw(tb testing.TB) {
	tb.Helper()
	signalTree(n.n.cmd.Process.Pid, syscall.SIGCONT)
}

// ConnectionState answers the state ("running", "blocking", "blocked", ...)
// of the node's first client connection whose client properties contain
// match (its connection_name, say), and "" when there is none.
func (n *Node) ConnectionState(tb testing.TB, match string) string {
	tb.Helper()
	out := n.Ctl(tb, "list_connections", "--formatter", "json", "client_properties", "state")
	var conns []struct {
		Client json.RawMessage `json:"client_properties"`
		State  string          `json:"state"`
	}
	if err := json.Unmarshal([]byte(out), &conns); err != nil {
		tb.Fatalf("list_connections of node %s: %v\n%s", n.Name, err, out)
	}
	for _, c := range conns {
		if strings.Contains(string(c.Client), match) {
			return c.State
		}
	}
	return ""
}
