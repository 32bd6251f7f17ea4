package testkit

import (
	"crypto/tls"
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
