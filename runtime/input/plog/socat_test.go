package plog

import (
	"bytes"
	"encoding/json"
	"os/exec"
	"testing"

	"github.com/tally-billing/tally-openstack-collector/internal/testkit"
)

// The seed's own examples, run with socat as an operator would.
func TestSocatExamples(t *testing.T) {
	socat := testkit.LookPath(t, "socat", "socat")
	h := newHarness(t, 0, udpOnly())
	run := func(in []byte, args ...string) []byte {
		t.Helper()
		cmd := exec.Command(socat, args...)
		cmd.Stdin = bytes.NewReader(in)
		out, err := cmd.Output()
		if err != nil {
			t.Fatalf("socat %v: %v", args, err)
		}
		return out
	}
	dst := "UDP-DATAGRAM:" + h.addr(0)
	run(canonical("from-socat"), "-t0", "-", dst)
	if ev := h.events(1)[0]; ev["resource_id"] != "from-socat" {
		t.Fatalf("event %v", ev)
	}
	if out := run([]byte("\x00\x00PingFor17575\n\n"), "-t0.3", "-", dst); string(out) != "PONGFor17575\n\n" {
		t.Fatalf("PING answered %q", out)
	}
	var stat map[string]any
	out := run([]byte("\x00\x00statistics please, gentle service"), "-t0.3", "-", dst)
	if err := json.Unmarshal(out, &stat); err != nil || stat["udp_simple_messages"].(float64) != 1 {
		t.Fatalf("STAT answered %q: %v", out, err)
	}
	tcp := newHarness(t, 0, tcpOnly(Settings{}))
	run(append(canonical("tcp-socat"), '\n'), "-", "TCP:"+tcp.addr(0))
	if ev := tcp.events(1)[0]; ev["resource_id"] != "tcp-socat" {
		t.Fatalf("event %v", ev)
	}
}
