package e2e

// The HTTP surface of the running binary: which routes answer whom.

import (
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/tally-billing/tally-openstack-collector/internal/testkit"
)

// getWith sends a GET to the collector, with a bearer token unless token is "".
func getWith(addr, path, token string) (int, string, error) {
	req, err := http.NewRequest(http.MethodGet, "http://"+addr+path, nil)
	if err != nil {
		return 0, "", err
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := (&http.Client{Timeout: 5 * time.Second}).Do(req)
	if err != nil {
		return 0, "", err
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b), nil
}

func mustGet(t *testing.T, addr, path, token string) (int, string) {
	t.Helper()
	code, body, err := getWith(addr, path, token)
	if err != nil {
		t.Fatalf("GET %s: %v", path, err)
	}
	return code, body
}

// protectedPaths are routes that must never answer an anonymous caller of a
// collector listening beyond loopback.
var protectedPaths = []string{"/mappers", "/deadletters", "/deadletters/1", "/ledger", "/debug/pprof/cmdline", "/debug/pprof/"}

// TestHTTPNonLoopbackWithoutTokenServesProbesOnly: the container setting,
// HTTP_ADDR=0.0.0.0, without a control token. The probes and the metrics
// answer; the mapper state, the dead letters and the profiler are refused
// with 403 and a message that says what to set, and each refusal is counted.
func TestHTTPNonLoopbackWithoutTokenServesProbesOnly(t *testing.T) {
	b, v, a := stack(t, "nova")
	_, port, _ := net.SplitHostPort(testkit.FreeAddr(t))
	c := newCollector(t, b, v, a.url(), a.token,
		"TALLY_OSC_HTTP_ADDR=0.0.0.0:"+port, "TALLY_OSC_DEBUG_PPROF=true",
		"TALLY_OSC_DEBUG_PPROF_ADDR="+testkit.FreeAddr(t))
	c.httpAddr = "127.0.0.1:" + port
	c.start(t)
	c.waitReady(t)
	for _, p := range []string{"/livez", "/readyz", "/metrics"} {
		if code, _ := mustGet(t, c.httpAddr, p, ""); code != http.StatusOK {
			t.Errorf("GET %s: %d, want 200", p, code)
		}
	}
	for _, p := range protectedPaths {
		code, body := mustGet(t, c.httpAddr, p, "")
		if code != http.StatusForbidden || !strings.Contains(body, "CONTROL_TOKEN") {
			t.Errorf("GET %s anonymously on 0.0.0.0: %d %q, want 403 naming CONTROL_TOKEN", p, code, body)
		}
	}
	// The routes that change state, new ones included, sit behind the same check.
	posts := []string{"/deadletters/replay", "/deadletters/purge", "/mappers/nova/promote", "/mappers/nova/abort"}
	for _, p := range posts {
		resp, err := http.Post("http://"+c.httpAddr+p, "application/json", strings.NewReader(`{"all":true}`))
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusForbidden {
			t.Errorf("POST %s anonymously on 0.0.0.0: %d, want 403", p, resp.StatusCode)
		}
	}
	if n := sum(c.metrics(t), "tally_collector_control_auth_failures_total", `reason="no_token"`); n != float64(len(protectedPaths)+len(posts)) {
		t.Errorf("refusals counted: %v, want %d", n, len(protectedPaths)+len(posts))
	}
	// The control command says why it is refused.
	cmd := c.cliCmd("mappers")
	out, err := cmd.CombinedOutput()
	if err == nil || !strings.Contains(string(out), "CONTROL_TOKEN") {
		t.Errorf("mappers on a refused daemon: %v\n%s", err, out)
	}
}

// TestHTTPControlTokenGuardsEveryRoute: with CONTROL_TOKEN_FILE set, every
// route but the probes and the metrics needs the token, reads included; a
// wrong token reads nothing; the file is read again when it changes; the
// control command sends the token from the file; the profiler, on its own
// loopback listener, needs it too; failures are counted and logged, sampled,
// without the token presented.
func TestHTTPControlTokenGuardsEveryRoute(t *testing.T) {
	b, v, a := stack(t, "nova")
	tokFile := filepath.Join(t.TempDir(), "control-token")
	const first, second = "ctl-first-0123456789", "ctl-second-9876543210"
	if err := os.WriteFile(tokFile, []byte(first+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	pprofAddr := testkit.FreeAddr(t)
	c := newCollector(t, b, v, a.url(), a.token, "TALLY_OSC_CONTROL_TOKEN_FILE="+tokFile,
		"TALLY_OSC_DEBUG_PPROF=true", "TALLY_OSC_DEBUG_PPROF_ADDR="+pprofAddr)
	c.start(t)
	c.waitReady(t)

	const wrong = "presented-wrong-token-abcdef"
	attempts := 0
	for _, p := range []string{"/mappers", "/deadletters", "/deadletters/1", "/ledger"} {
		for _, tok := range []string{"", wrong} {
			attempts++
			if code, body := mustGet(t, c.httpAddr, p, tok); code != http.StatusUnauthorized {
				t.Errorf("GET %s with token %q: %d %s, want 401", p, tok, code, body)
			}
		}
	}
	if code, _ := mustGet(t, c.httpAddr, "/mappers", first); code != http.StatusOK {
		t.Errorf("GET /mappers with the token: %d", code)
	}
	if code, _ := mustGet(t, c.httpAddr, "/deadletters", first); code != http.StatusOK {
		t.Errorf("GET /deadletters with the token: %d", code)
	}
	if code, _ := mustGet(t, c.httpAddr, "/ledger", first); code != http.StatusOK {
		t.Errorf("GET /ledger with the token: %d", code)
	}
	// The profiler is not on HTTP_ADDR; on its own listener it needs the token.
	if code, _ := mustGet(t, c.httpAddr, "/debug/pprof/cmdline", first); code != http.StatusNotFound {
		t.Errorf("pprof on HTTP_ADDR: %d, want 404", code)
	}
	attempts++
	if code, _ := mustGet(t, pprofAddr, "/debug/pprof/cmdline", ""); code != http.StatusUnauthorized {
		t.Errorf("pprof without the token: %d, want 401", code)
	}
	if code, _ := mustGet(t, pprofAddr, "/debug/pprof/cmdline", first); code != http.StatusOK {
		t.Errorf("pprof with the token: %d, want 200", code)
	}
	// The control command reads the same file.
	if out := c.cli(t, "mappers"); !strings.Contains(out, "nova") {
		t.Errorf("mappers with CONTROL_TOKEN_FILE:\n%s", out)
	}

	// Many failures: all counted, few logged.
	for i := 0; i < 40; i++ {
		attempts++
		_, _ = mustGet(t, c.httpAddr, "/deadletters", wrong)
	}
	m := c.metrics(t)
	if got := sum(m, "tally_collector_control_auth_failures_total"); got != float64(attempts) {
		t.Errorf("failures counted: %v, want %d", got, attempts)
	}
	out := c.p.out.String()
	logged := strings.Count(out, "control route refused")
	if logged == 0 || logged > 10 {
		t.Errorf("%d refusals logged for %d failures, want a sample (1..10)", logged, attempts)
	}
	if strings.Contains(out, wrong) || strings.Contains(out, first) {
		t.Error("a token reached the log")
	}

	// Rotation: the new token works, the old one no longer does.
	tmp := tokFile + ".new"
	if err := os.WriteFile(tmp, []byte(second+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, tokFile); err != nil {
		t.Fatal(err)
	}
	testkit.WaitFor(t, 10*time.Second, "the rotated token accepted", func() bool {
		code, _, err := getWith(c.httpAddr, "/mappers", second)
		return err == nil && code == http.StatusOK
	})
	if code, _ := mustGet(t, c.httpAddr, "/mappers", first); code != http.StatusUnauthorized {
		t.Errorf("the old token after rotation: %d, want 401", code)
	}
	_ = c.cli(t, "deadletter", "list") // fails the test unless it exits 0
}

// cliCmd is a control command of the binary with the collector's settings.
func (c *collector) cliCmd(args ...string) *exec.Cmd {
	cmd := exec.Command(c.bin, args...)
	cmd.Env = c.env
	return cmd
}
