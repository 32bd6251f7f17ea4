package e2e

import (
	"context"
	"crypto/tls"
	"net/http"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/tally-billing/tally-openstack-collector/internal/testkit"
)

// The binary over TLS on both of its links, as an operator of a
// kolla-ansible or OpenStack-Helm cloud runs it: a broker behind a private CA
// that demands client certificates (the test process's own RabbitMQ node,
// testkit.RabbitMQTLS), and a Reporting API behind another private CA that
// demands one too (the reference API with --tls-client-ca).

// apiTLS are the files of a reference API serving https, and a client that
// trusts it and presents a certificate it accepts.
type apiTLS struct {
	cert, key, clientCA string
	client              *http.Client
}

// startTLSAPI starts the reference API serving https with a certificate for
// 127.0.0.1 from a CA of its own, demanding client certificates from that CA.
// It answers the API, its CA and a client certificate for the collector.
func startTLSAPI(t *testing.T, b bins) (*api, *testkit.CA, testkit.Cert) {
	t.Helper()
	ca := testkit.NewCA(t, t.TempDir(), "tally-api")
	srv := ca.Issue(t, "api", "127.0.0.1", testkit.CertOptions{Hosts: []string{"127.0.0.1"}})
	collector := ca.Issue(t, "collector", "tally-openstack-collector", testkit.CertOptions{})
	admin := ca.Issue(t, "admin", "test-admin", testkit.CertOptions{})
	pair, err := tls.LoadX509KeyPair(admin.CertFile, admin.KeyFile)
	if err != nil {
		t.Fatal(err)
	}
	a := &api{bin: b.api, dataDir: t.TempDir(), addr: testkit.FreeAddr(t), token: "e2e-" + randHex(12),
		tls: &apiTLS{cert: srv.CertFile, key: srv.KeyFile, clientCA: ca.CAFile, client: &http.Client{Timeout: 30 * time.Second,
			Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: ca.Pool(), Certificates: []tls.Certificate{pair}}}}}}
	a.start(t)
	return a, ca, collector
}

// tlsSetup: the binaries, the TLS nodes, the corpus, and its exchanges
// declared on the node that demands client certificates.
func tlsSetup(t *testing.T) (bins, *testkit.TLSBroker, *corpus, *vhost) {
	t.Helper()
	if testing.Short() {
		t.Skip("end-to-end test")
	}
	rb := testkit.RabbitMQTLS(t)
	c := loadCorpus(t)
	v := rb.Required.Vhost()
	v.DeclareExchanges(t, false, c.exchanges()...)
	return buildBinaries(t), rb, c, v
}

// TestTLSDaemonBothLinks: the daemon consumes over amqps from a listener
// with fail_if_no_peer_cert, its control link comes up over the same TLS,
// and it delivers to an https Reporting API that demands a client
// certificate: every TLS setting reaches its link. The key files' content
// appears nowhere in the output, their paths may.
func TestTLSDaemonBothLinks(t *testing.T) {
	bb, rb, c, v := tlsSetup(t)
	a, _, client := startTLSAPI(t, bb)

	col := newCollectorAt(t, bb, rb.Required.AMQPS(""), a.url(), a.token,
		"TALLY_OSC_QUEUE_TYPE=classic",
		"TALLY_OSC_QUEUE=tls-daemon",
		"TALLY_OSC_EXCHANGES="+strings.Join(c.exchanges(), ","),
		"TALLY_OSC_REPORTING_INSECURE=false",
		"TALLY_OSC_TRANSPORT_CA_FILE="+rb.CA.CAFile,
		"TALLY_OSC_TRANSPORT_CERT_FILE="+rb.Client.CertFile,
		"TALLY_OSC_TRANSPORT_KEY_FILE="+rb.Client.KeyFile,
		"TALLY_OSC_REPORTING_CA_FILE="+a.tls.clientCA,
		"TALLY_OSC_REPORTING_CERT_FILE="+client.CertFile,
		"TALLY_OSC_REPORTING_KEY_FILE="+client.KeyFile,
	)
	col.start(t)
	col.waitReady(t)
	testkit.WaitFor(t, 60*time.Second, "the control link up over TLS", func() bool {
		return col.metrics(t)["tally_collector_control_link_up"] == 1
	})
	prefix := randHex(4)
	publishRaw(t, v, c, prefix, 0, 5)
	waitAccepted(t, a, 5, 60*time.Second)
	var st struct {
		ClientCerts map[string]int64 `json:"client_certs"`
	}
	a.do(t, "GET", "/api/v1/stats", nil, &st)
	var seen bool
	for s := range st.ClientCerts {
		seen = seen || strings.Contains(s, "CN=tally-openstack-collector")
	}
	if !seen {
		t.Fatalf("the API saw no POST with the collector's certificate: %v", st.ClientCerts)
	}
	if subjects := rb.Required.PeerCertSubjects(t); len(subjects) < 2 || !allHold(subjects, "CN=tally-collector") {
		t.Fatalf("broker connections' client certificates %q, want the consumer's and the control link's", subjects)
	}
	checkLedgerTotals(t, col, 5)
	if code, _ := col.p.stop(t, 60*time.Second); code != 0 {
		t.Fatalf("exit code %d", code)
	}
	checkNoKeyMaterial(t, col.p.out.String(), rb.Client.KeyFile, client.KeyFile)
}

func allHold(xs []string, part string) bool {
	for _, x := range xs {
		if !strings.Contains(x, part) {
			return false
		}
	}
	return true
}

// checkNoKeyMaterial: nothing of the keys' content is in out.
func checkNoKeyMaterial(t *testing.T, out string, keyFiles ...string) {
	t.Helper()
	if strings.Contains(out, "PRIVATE KEY") {
		t.Error("a PEM key block in the output")
	}
	for _, f := range keyFiles {
		b := testkit.ReadFile(t, f)
		for _, line := range strings.Split(string(b), "\n") {
			if len(line) >= 32 && !strings.HasPrefix(line, "-----") && strings.Contains(out, line) {
				t.Errorf("a line of %s in the output", f)
			}
		}
	}
}

// TestTLSDumpBinary: `tally-openstack-collector --dump` over amqps to a
// listener that demands client certificates prints what is published, with
// the CA, certificate and key given as settings; without the client
// certificate it fails, saying which settings to set.
func TestTLSDumpBinary(t *testing.T) {
	bb, rb, c, v := tlsSetup(t)
	env := append(os.Environ(),
		"TALLY_OSC_TRANSPORT_URL="+rb.Required.AMQPS(""),
		"TALLY_OSC_EXCHANGES="+strings.Join(c.exchanges(), ","),
		"TALLY_OSC_TRANSPORT_CA_FILE="+rb.CA.CAFile,
		"TALLY_OSC_LOG_FORMAT=json",
	)

	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, bb.collector, "--dump")
	cmd.Env = env
	out, err := cmd.CombinedOutput()
	if err == nil || !strings.Contains(string(out), "set TRANSPORT_CERT_FILE and TRANSPORT_KEY_FILE") {
		t.Fatalf("--dump without a client certificate: %v\n%s", err, out)
	}

	p := startProc(t, "dump", bb.collector, []string{"--dump"}, append(env,
		"TALLY_OSC_TRANSPORT_CERT_FILE="+rb.Client.CertFile, "TALLY_OSC_TRANSPORT_KEY_FILE="+rb.Client.KeyFile))
	testkit.WaitFor(t, 60*time.Second, "the dump bound", func() bool {
		if !p.running() {
			t.Fatalf("--dump exited: %v\n%s", p.err, p.out.String())
		}
		return strings.Contains(p.out.String(), "dump bound")
	})
	prefix := randHex(4)
	publishRaw(t, v, c, prefix, 0, 3)
	testkit.WaitFor(t, 30*time.Second, "three deliveries printed", func() bool {
		out := p.out.String()
		return strings.Contains(out, messageID(prefix, 0)) && strings.Contains(out, messageID(prefix, 1)) && strings.Contains(out, messageID(prefix, 2))
	})
	p.stop(t, 30*time.Second)
	checkNoKeyMaterial(t, p.out.String(), rb.Client.KeyFile)
}
