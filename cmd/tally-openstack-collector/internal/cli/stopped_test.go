package cli

// The read commands on a stopped daemon: nothing answers on HTTP_ADDR, so
// ledger, reconcile, deadletter list|show and mappers read the outbox at
// BUFFER_PATH read-only; while a collector holds it, or when there is none,
// the error names the address tried and what to give instead.

import (
	"bytes"
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/tally-billing/tally-openstack-collector/cmd/tally-openstack-collector/internal/daemon"
	"github.com/tally-billing/tally-openstack-collector/cmd/tally-openstack-collector/internal/settings"
	"github.com/tally-billing/tally-openstack-collector/internal/testkit"
	"github.com/tally-billing/tally-openstack-collector/outbox"
	"github.com/tally-billing/tally-openstack-collector/outbox/ledger"
	"github.com/tally-billing/tally-openstack-collector/runtime/catalog"
)

const catalogTestdata = "../../../../runtime/catalog/testdata/"

// stoppedCollector writes an outbox as a daemon leaves it when stopped:
// a ledger row, two dead letters (one undeliverable), and the mapper
// decisions of a catalogue over mdir (echo@1.0.0 in service). It answers
// the environment of the commands: HTTP_ADDR where nothing listens, and
// BUFFER_PATH and MAPPERS_DIR.
func stoppedCollector(t *testing.T) (env []string, dir, mdir string, taken time.Time) {
	t.Helper()
	ctx := context.Background()
	dir = filepath.Join(t.TempDir(), "outbox")
	mdir = t.TempDir()
	testkit.CopyFile(t, catalogTestdata+"echo_v1.wasm", filepath.Join(mdir, "echo_v1.wasm"))
	env = []string{
		"TALLY_OSC_MAPPER_CACHE_DIR=" + testkit.CacheDir(t),
		"TALLY_OSC_HTTP_ADDR=" + testkit.FreeAddr(t),
		"TALLY_OSC_BUFFER_PATH=" + dir,
		"TALLY_OSC_MAPPERS_DIR=" + mdir,
	}
	ob := openOutbox(t, dir)
	taken = time.Now().UTC()
	d := &ledger.Delta{}
	d.Row(ledger.Key{Hour: ledger.HourOf(taken), Source: "nova", Type: "compute.instance.exists"}).Skip("unclaimed")
	if err := ob.AppendCounted(ctx, nil, taken, d); err != nil {
		t.Fatal(err)
	}
	if err := ob.AppendDeadLetters(ctx, []outbox.DeadLetter{
		{Body: []byte(`{"event_type":"test.one","payload":{"password":"hunter2"}}`), EventType: "test.one", Module: "echo@1.0.0", Reason: "mapper_error", Detail: "trap", At: taken},
		{Body: []byte(`not json`), Reason: "oversized", At: taken, Undeliverable: true},
	}); err != nil {
		t.Fatal(err)
	}
	cfg, err := settings.Load(nil, env, settings.ModeOffline)
	if err != nil {
		t.Fatal(err)
	}
	ms, err := daemon.StoppedMappers(ctx, cfg, zerolog.Nop(), ob) // the catalogue saves its decisions, as the daemon's does
	if err != nil {
		t.Fatal(err)
	}
	if err := ms.Close(ctx); err != nil {
		t.Fatal(err)
	}
	if rec, err := ob.LoadRecord("catalog"); err != nil || rec == nil {
		t.Fatalf("the catalogue saved no decisions: %q, %v", rec, err)
	}
	if err := ob.Close(); err != nil {
		t.Fatal(err)
	}
	return env, dir, mdir, taken
}

func TestReadCommandsOnAStoppedDaemon(t *testing.T) {
	env, dir, mdir, _ := stoppedCollector(t)
	addr := strings.TrimPrefix(env[1], "TALLY_OSC_HTTP_ADDR=")

	code, out, errOut := runCmd(t, "", env, "ledger", "--json")
	var rep ledger.Report
	if code != 0 || json.Unmarshal([]byte(out), &rep) != nil || len(rep.Intake) != 1 || rep.Intake[0].Skipped["unclaimed"] != 1 {
		t.Fatalf("ledger: exit %d\n%s%s", code, out, errOut)
	}
	if !strings.Contains(errOut, addr) || !strings.Contains(errOut, dir) {
		t.Errorf("ledger does not say it read %s instead of %s: %s", dir, addr, errOut)
	}

	code, out, errOut = runCmd(t, "", env, "deadletter", "list")
	var list []catalog.DeadLetterInfo
	if code != 0 || json.Unmarshal([]byte(out), &list) != nil || len(list) != 2 || list[0].Reason != "mapper_error" || list[1].Reason != "oversized" ||
		list[0].Undeliverable || !list[1].Undeliverable {
		t.Fatalf("deadletter list: exit %d\n%s%s", code, out, errOut)
	}
	code, out, errOut = runCmd(t, "", env, "deadletter", "show", "1")
	var one catalog.DeadLetterDetail
	if code != 0 || json.Unmarshal([]byte(out), &one) != nil || one.Module != "echo@1.0.0" || len(one.Message) == 0 || strings.Contains(out, "hunter2") {
		t.Fatalf("deadletter show 1: exit %d\n%s%s", code, out, errOut)
	}
	if code, _, errOut = runCmd(t, "", env, "deadletter", "show", "9"); code != 1 || !strings.Contains(errOut, "9") {
		t.Errorf("deadletter show of an unknown letter: exit %d: %s", code, errOut)
	}
	code, _, errOut = runCmd(t, "", env, "deadletter", "replay")
	if code != 1 || !strings.Contains(errOut, addr) || !strings.Contains(errOut, "running daemon") {
		t.Errorf("deadletter replay on a stopped daemon: exit %d: %s", code, errOut)
	}

	// A new version dropped in while the daemon is stopped: its next start
	// shadows it (MAPPERS_PROMOTE=shadow), following the saved decisions;
	// without them the directory would be taken as it stands, 2.0.0 in service.
	testkit.CopyFile(t, catalogTestdata+"echo_v2.wasm", filepath.Join(mdir, "echo_v2.wasm"))
	code, out, errOut = runCmd(t, "", env, "mappers")
	if code != 0 || !strings.Contains(out, "echo@1.0.0") || !strings.Contains(out, "echo@2.0.0 in shadow of echo@1.0.0") {
		t.Fatalf("mappers: exit %d\n%s%s", code, out, errOut)
	}
	if !strings.Contains(errOut, addr) || !strings.Contains(errOut, mdir) {
		t.Errorf("mappers does not say it read %s instead of %s: %s", mdir, addr, errOut)
	}
	if code, _, errOut = runCmd(t, "", env, "mappers", "promote", "echo"); code != 1 || !strings.Contains(errOut, "running daemon") {
		t.Errorf("mappers promote on a stopped daemon: exit %d: %s", code, errOut)
	}

	// reconcile reads the same ledger; the API has nothing stored.
	api := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write([]byte(`{"counts":[]}`))
	}))
	defer api.Close()
	renv := append(env, "TALLY_OSC_REPORTING_URL="+api.URL, "TALLY_OSC_REPORTING_TOKEN=t", "TALLY_OSC_REPORTING_INSECURE=true")
	code, out, errOut = runCmd(t, "", renv, "reconcile", "--from", "2h", "--to", "0s")
	if code != 0 || !strings.Contains(errOut, dir) {
		t.Fatalf("reconcile: exit %d\n%s%s", code, out, errOut)
	}

	// The store was only read: a collector opens it, the decisions as saved.
	ob := openOutbox(t, dir)
	defer ob.Close()
	if ob.DeadLetterCount() != 2 {
		t.Errorf("dead letters %d, want 2", ob.DeadLetterCount())
	}
}

// While a collector holds the outbox, or where there is none, the commands
// refuse, naming the address they tried and what to give instead.
func TestReadCommandsWithoutDaemonOrOutbox(t *testing.T) {
	env, dir, _, _ := stoppedCollector(t)
	addr := strings.TrimPrefix(env[1], "TALLY_OSC_HTTP_ADDR=")
	held := openOutbox(t, dir)
	for _, args := range [][]string{{"ledger"}, {"deadletter", "list"}, {"deadletter", "show", "1"}, {"mappers"}} {
		code, out, errOut := runCmd(t, "", env, args...)
		if code == 0 || out != "" || !strings.Contains(errOut, addr) || !strings.Contains(errOut, "held by a running collector") ||
			!strings.Contains(errOut, "TALLY_OSC_HTTP_ADDR") || !strings.Contains(errOut, dir) {
			t.Errorf("%v with the outbox held: exit %d\n%s%s", args, code, out, errOut)
		}
	}
	if err := held.Close(); err != nil {
		t.Fatal(err)
	}

	missing := filepath.Join(t.TempDir(), "none")
	env = append(env, "TALLY_OSC_BUFFER_PATH="+missing)
	for _, args := range [][]string{{"ledger"}, {"deadletter", "list"}, {"mappers"}} {
		code, out, errOut := runCmd(t, "", env, args...)
		if code == 0 || out != "" || !strings.Contains(errOut, addr) || !strings.Contains(errOut, missing) || !strings.Contains(errOut, "holds no outbox") {
			t.Errorf("%v without an outbox: exit %d\n%s%s", args, code, out, errOut)
		}
		if args[0] == "ledger" && !strings.Contains(errOut, "--merge DIR") {
			t.Errorf("ledger without an outbox does not name --merge: %s", errOut)
		}
	}
	if _, err := os.Stat(missing); !os.IsNotExist(err) {
		t.Errorf("the commands created %s: %v", missing, err)
	}

	// A daemon that answers is asked, whatever BUFFER_PATH holds.
	var stdout, stderr bytes.Buffer
	ob := openOutbox(t, dir)
	defer ob.Close()
	srv := httptest.NewServer(catalog.NewHandler(nil, catalog.HandlerOptions{Outbox: ob}))
	defer srv.Close()
	env = append(env, "TALLY_OSC_HTTP_ADDR="+strings.TrimPrefix(srv.URL, "http://"))
	if code := Run([]string{"deadletter", "list"}, env, nil, &stdout, &stderr, Stamp{}); code != 0 || !strings.Contains(stdout.String(), "mapper_error") || stderr.Len() > 0 {
		t.Errorf("deadletter list against a running daemon: exit %d\n%s%s", code, stdout.String(), stderr.String())
	}
	// docs/outbox.md: an undeliverable letter is marked so in deadletter show.
	stdout.Reset()
	if code := Run([]string{"deadletter", "show", "2"}, env, nil, &stdout, &stderr, Stamp{}); code != 0 || !strings.Contains(stdout.String(), `"undeliverable": true`) {
		t.Errorf("deadletter show of an undeliverable letter: exit %d\n%s%s", code, stdout.String(), stderr.String())
	}
	stdout.Reset()
	if code := Run([]string{"deadletter", "show", "1"}, env, nil, &stdout, &stderr, Stamp{}); code != 0 || strings.Contains(stdout.String(), "undeliverable") {
		t.Errorf("deadletter show of a letter a replay can deliver: exit %d\n%s%s", code, stdout.String(), stderr.String())
	}
}
