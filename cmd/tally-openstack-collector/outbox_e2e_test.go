package main

import (
	"errors"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// A second collector started on the BUFFER_PATH of a running one exits at
// once, non-zero, saying that the directory is in use; the first goes on.
func TestEndToEndSecondCollectorOnTheSameOutbox(t *testing.T) {
	needBroker(t)
	b := buildBinaries(t)
	v := newVhost(t)
	v.declareExchanges(t, "nova", "neutron", "openstack", "glance")
	a := startAPI(t, b)
	first := newCollector(t, b, v, a.url(), a.token)
	first.start(t)
	first.waitReady(t)

	second := &collector{bin: b.collector, httpAddr: freeAddr(t)}
	for _, kv := range first.env {
		if !strings.HasPrefix(kv, "TALLY_OSC_HTTP_ADDR=") {
			second.env = append(second.env, kv)
		}
	}
	second.env = append(second.env, "TALLY_OSC_HTTP_ADDR="+second.httpAddr)
	second.start(t)
	select {
	case <-second.p.done:
	case <-time.After(60 * time.Second):
		t.Fatal("the second collector is still running on the same outbox")
	}
	var ee *exec.ExitError
	if !errors.As(second.p.err, &ee) || ee.ExitCode() == 0 {
		t.Fatalf("second collector exit: %v", second.p.err)
	}
	var dir string
	for _, kv := range first.env {
		if p, ok := strings.CutPrefix(kv, "TALLY_OSC_BUFFER_PATH="); ok {
			dir = p
		}
	}
	out := second.p.out.String()
	if !strings.Contains(out, "another collector already uses this BUFFER_PATH") || !strings.Contains(out, filepath.Clean(dir)) {
		t.Fatalf("second collector's message does not say why:\n%s", tail(out, 3000))
	}
	if code, _, err := first.get("/readyz"); err != nil || code != 200 || !first.p.running() {
		t.Fatalf("first collector after the second was refused: %d %v running %v", code, err, first.p.running())
	}
	if code, _ := first.p.stop(t, 40*time.Second); code != 0 {
		t.Fatalf("first collector exit %d", code)
	}
}
