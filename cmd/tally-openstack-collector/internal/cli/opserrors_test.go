package cli

// What the commands say when something is wrong: each cause once, the
// setting or flag the user typed, the path or the peer involved.

import (
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/tally-billing/tally-openstack-collector/internal/testkit"
	"github.com/tally-billing/tally-openstack-collector/runtime/catalog"
)

// TestPrintConfigWithoutRequiredSettings: --print-config prints every
// setting even when the daemon could not start, marking what is missing, and
// warns about a misspelt variable.
func TestPrintConfigWithoutRequiredSettings(t *testing.T) {
	code, out, errOut := runCmd(t, "", []string{"TALLY_OSC_CONTROL_TOKEN=ctl-987", "TALLY_OSC_PREFECH=5"}, "--print-config")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errOut)
	}
	testkit.WantAll(t, "the output", out,
		"TALLY_OSC_REPORTING_URL=  # missing: TALLY_OSC_REPORTING_URL: required",
		"TALLY_OSC_REPORTING_TOKEN=  # missing:",
		"TALLY_OSC_PREFETCH=100\n",
		"TALLY_OSC_CONTROL_TOKEN=[redacted]\n",
	)
	if strings.Contains(out, "ctl-987") {
		t.Errorf("a secret printed:\n%s", out)
	}
	testkit.WantAll(t, "standard error", errOut, "warning: TALLY_OSC_PREFECH is not a setting and is ignored; did you mean TALLY_OSC_PREFETCH?", "2 setting problem(s), marked above: the daemon would refuse to start")
}

// controlEnv points the control commands at srv.
func controlEnv(t *testing.T, srv *httptest.Server, more ...string) []string {
	t.Helper()
	return append([]string{"TALLY_OSC_HTTP_ADDR=" + strings.TrimPrefix(srv.URL, "http://")}, more...)
}

// TestControlErrorsSayEachCauseOnce: a refused purge and an unknown letter,
// answered by the daemon's own routes, say their cause once.
func TestControlErrorsSayEachCauseOnce(t *testing.T) {
	ob := openOutbox(t, t.TempDir())
	defer ob.Close()
	srv := httptest.NewServer(catalog.NewHandler(nil, catalog.HandlerOptions{Outbox: ob}))
	defer srv.Close()

	code, _, errOut := runCmd(t, "", controlEnv(t, srv), "deadletter", "purge")
	if code != 2 || strings.Count(errOut, "invalid purge") != 1 || !strings.Contains(errOut, "give a sequence range") {
		t.Errorf("purge without criteria: exit %d: %s", code, errOut)
	}
	code, _, errOut = runCmd(t, "", controlEnv(t, srv), "deadletter", "show", "99")
	if code != 1 || strings.Count(errOut, "not found") != 1 || !strings.Contains(errOut, "dead letter 99") {
		t.Errorf("show of an unknown letter: exit %d: %s", code, errOut)
	}
}

// TestUnauthorizedNamesTheTokenSetting: a refused token is reported with
// the setting the command read it from (the flag when it came from one, with
// its path), or both settings when none was sent.
func TestUnauthorizedNamesTheTokenSetting(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusUnauthorized)
		_, _ = w.Write([]byte(`{"error":"wrong control token"}`))
	}))
	defer srv.Close()
	tokenFile := filepath.Join(t.TempDir(), "control-token")
	if err := os.WriteFile(tokenFile, []byte("nope\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		env   []string
		args  []string
		wants []string
	}{
		{nil, []string{"deadletter", "list"}, []string{"no control token was sent: set TALLY_OSC_CONTROL_TOKEN_FILE (or TALLY_OSC_CONTROL_TOKEN)"}},
		{nil, []string{"mappers", "--control-token-file", tokenFile}, []string{"check --control-token-file (" + tokenFile + ")"}},
		{[]string{"TALLY_OSC_CONTROL_TOKEN=nope"}, []string{"deadletter", "list"}, []string{"check TALLY_OSC_CONTROL_TOKEN:"}},
	}
	for _, tc := range cases {
		code, _, errOut := runCmd(t, "", controlEnv(t, srv, tc.env...), tc.args...)
		if code != 1 || strings.Count(errOut, "unauthorized") != 1 {
			t.Errorf("%v: exit %d: %s", tc.args, code, errOut)
		}
		testkit.WantAll(t, fmt.Sprint(tc.args), errOut, tc.wants...)
	}
}

// TestMissingTokenFileNamesThePath: the flag as typed, and the path.
func TestMissingTokenFileNamesThePath(t *testing.T) {
	code, _, errOut := runCmd(t, "", nil, "deadletter", "list", "--control-token-file", "/nonexistent/control-token")
	if code != 2 || !strings.Contains(errOut, "--control-token-file") || !strings.Contains(errOut, "/nonexistent/control-token") {
		t.Errorf("exit %d: %s", code, errOut)
	}
}

// TestReplayWithLettersStillFailingExitsNonZero: a replay the daemon ran
// whole but where letters still fail is no success.
func TestReplayWithLettersStillFailingExitsNonZero(t *testing.T) {
	var rep catalog.ReplayReport
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/deadletters/replay" {
			http.NotFound(w, r)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(rep)
	}))
	defer srv.Close()
	rep = catalog.ReplayReport{Examined: 3, Remaining: 3, Failures: []catalog.ReplayFailure{{Seq: 1, Reason: "trap"}}}
	code, out, errOut := runCmd(t, "", controlEnv(t, srv), "deadletter", "replay")
	if code != 1 || !strings.Contains(out, `"remaining": 3`) || !strings.Contains(errOut, "3 of 3 letters still fail") {
		t.Errorf("every letter failed: exit %d: %s%s", code, out, errOut)
	}
	rep = catalog.ReplayReport{Examined: 3, Replayed: 3, Events: 3}
	if code, _, errOut := runCmd(t, "", controlEnv(t, srv), "deadletter", "replay"); code != 0 {
		t.Errorf("every letter replayed: exit %d: %s", code, errOut)
	}
}

// TestReconcileNamesTheAPI: with the Reporting API out of reach, reconcile
// says which peer failed, by its URL and setting.
func TestReconcileNamesTheAPI(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "outbox")
	ob := openOutbox(t, dir)
	if err := ob.Close(); err != nil {
		t.Fatal(err)
	}
	// A port nothing listens on: taken, then released.
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	down := "http://" + l.Addr().String()
	_ = l.Close()
	env := []string{"TALLY_OSC_REPORTING_TOKEN=t", "TALLY_OSC_REPORTING_INSECURE=true"}
	code, _, errOut := runCmd(t, "", env, "reconcile", "--from", "2h", "--to", "0s", "--reporting-url", down, "--merge", dir)
	if code != 2 || !strings.Contains(errOut, "reconcile: Reporting API at "+down+" (--reporting-url): ") || !strings.Contains(errOut, "connection refused") {
		t.Errorf("exit %d: %s", code, errOut)
	}
}
