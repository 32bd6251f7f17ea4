package testkit

import (
	"crypto/tls"
	"fmt"
	"net"
	"os"
	"strings"
	"testing"

	amqp "github.com/rabbitmq/amqp091-go"
)

func TestMain(m *testing.M) { os.Exit(Main(m)) }

// TestRabbitMQTLSNodes: both nodes answer over TLS with the test CA; the
// required node refuses a client without a certificate and shows the subject
// of one with it.
func TestRabbitMQTLSNodes(t *testing.T) {
	b := RabbitMQTLS(t)
	pair, err := tls.LoadX509KeyPair(b.Client.CertFile, b.Client.KeyFile)
	if err != nil {
		t.Fatal(err)
	}
	c, err := amqp.DialTLS(b.Optional.AMQPS(""), &tls.Config{RootCAs: b.CA.Pool()})
	if err != nil {
		t.Fatalf("optional node without a client certificate: %v", err)
	}
	c.Close()
	if c, err := amqp.DialTLS(b.Required.AMQPS(""), &tls.Config{RootCAs: b.CA.Pool()}); err == nil {
		c.Close()
		t.Fatal("the required node took a client without a certificate")
	}
	c, err = amqp.DialTLS(b.Required.AMQPS(""), &tls.Config{RootCAs: b.CA.Pool(), Certificates: []tls.Certificate{pair}})
	if err != nil {
		t.Fatalf("required node with the client certificate: %v", err)
	}
	defer c.Close()
	subjects := b.Required.PeerCertSubjects(t)
	if len(subjects) != 1 || !strings.Contains(subjects[0], "CN=tally-collector") {
		t.Fatalf("peer certificate subjects %q, want the client's", subjects)
	}
}

// TestTLSNodePortsBelowTheEphemeralRange: the nodes' ports come from a band
// that port 0 and outgoing connections never draw from, and a port in use is
// passed over.
func TestTLSNodePortsBelowTheEphemeralRange(t *testing.T) {
	raw, err := os.ReadFile("/proc/sys/net/ipv4/ip_local_port_range")
	if err != nil {
		t.Fatal(err)
	}
	var lo, hi int
	if _, err := fmt.Sscan(string(raw), &lo, &hi); err != nil {
		t.Fatalf("ip_local_port_range %q: %v", raw, err)
	}
	if tlsPortHigh >= lo {
		t.Fatalf("TLS node ports %d-%d reach the ephemeral range %d-%d", tlsPortLow, tlsPortHigh, lo, hi)
	}
	ports, err := choosePorts(tlsPortLow, tlsPortHigh, 6)
	if err != nil {
		t.Fatal(err)
	}
	seen := map[int]bool{}
	for _, p := range ports {
		if p < tlsPortLow || p > tlsPortHigh || seen[p] {
			t.Fatalf("ports %v: want six distinct ones in %d-%d", ports, tlsPortLow, tlsPortHigh)
		}
		seen[p] = true
	}
	taken, err := net.Listen("tcp", fmt.Sprintf("127.0.0.1:%d", ports[0]))
	if err != nil {
		t.Fatal(err)
	}
	defer taken.Close()
	got, err := choosePorts(ports[0], ports[0], 1)
	if err == nil {
		t.Fatalf("choosePorts answered %v, a port in use", got)
	}
}

// TestTLSNodeReadinessWantsRabbitMQ: a node whose TLS port is answered by
// something else (here a listener that speaks plain AMQP, as another broker's
// port would) is not ready.
func TestTLSNodeReadinessWantsRabbitMQ(t *testing.T) {
	b := RabbitMQTLS(t)
	foreign, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer foreign.Close()
	go func() {
		for {
			c, err := foreign.Accept()
			if err != nil {
				return
			}
			_, _ = c.Write([]byte("AMQP\x00\x00\x09\x01"))
			c.Close()
		}
	}()
	pair, err := tls.LoadX509KeyPair(b.Client.CertFile, b.Client.KeyFile)
	if err != nil {
		t.Fatal(err)
	}
	client := &tls.Config{RootCAs: b.CA.Pool(), Certificates: []tls.Certificate{pair}, ServerName: "localhost"}
	if err := b.Optional.answers(client); err != nil {
		t.Fatalf("the optional node itself: %v", err)
	}
	impostor := &TLSNode{Name: "impostor", PlainAddr: b.Optional.PlainAddr, TLSAddr: foreign.Addr().String()}
	err = impostor.answers(client)
	if err == nil || !strings.Contains(err.Error(), "TLS listener") {
		t.Fatalf("a plain AMQP listener on the TLS port: %v, want a TLS listener error", err)
	}
}
