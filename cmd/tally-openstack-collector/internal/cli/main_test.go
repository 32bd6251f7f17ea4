package cli

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/rs/zerolog"

	"github.com/tally-billing/tally-openstack-collector/internal/testkit"
	"github.com/tally-billing/tally-openstack-collector/outbox"
)

func runCmd(t *testing.T, stdin string, env []string, args ...string) (int, string, string) {
	t.Helper()
	var out, errb bytes.Buffer
	env = append([]string{"TALLY_OSC_MAPPER_CACHE_DIR=" + testkit.CacheDir(t)}, env...)
	code := Run(args, env, strings.NewReader(stdin), &out, &errb, Stamp{})
	return code, out.String(), errb.String()
}

// openOutbox opens the outbox in dir as the commands do, with no free-space
// floor; the caller closes it.
func openOutbox(t *testing.T, dir string) *outbox.Outbox {
	t.Helper()
	ob, err := outbox.Open(outbox.Options{Dir: dir, Logger: zerolog.Nop(), MinFreeBytes: -1})
	if err != nil {
		t.Fatalf("open the outbox in %s: %v", dir, err)
	}
	return ob
}

func TestVersion(t *testing.T) {
	code, out, _ := runCmd(t, "", nil, "version")
	if code != 0 || !strings.Contains(out, "tally-openstack-collector ") || !strings.Contains(out, "mapper ABI versions: 1") || !strings.Contains(out, "commit: ") {
		t.Fatalf("%d %q", code, out)
	}
}

func TestUsage(t *testing.T) {
	for _, args := range [][]string{{"--help"}, {"help"}, {"map", "--help"}, {"mapper", "test", "--help"}, {"deadletter", "--help"}, {"livez", "--help"}} {
		code, out, _ := runCmd(t, "", nil, args...)
		if code != 0 || !strings.Contains(out, "Usage") {
			t.Errorf("%v: %d %q", args, code, out)
		}
	}
	for _, args := range [][]string{{"frobnicate"}, {"--no-such-flag"}, {"mapper"}, {"mapper", "run"}, {"version", "extra"}, {"stray-arg-after", "x"}, {"livez", "extra"}} {
		if code, _, _ := runCmd(t, "", nil, args...); code != 2 {
			t.Errorf("%v: exit %d, want 2", args, code)
		}
	}
}

// TestInvalidSettingsExit: the daemon refuses to start, exit 2, one message
// listing every problem, no secret in it.
func TestInvalidSettingsExit(t *testing.T) {
	env := []string{"TALLY_OSC_PREFETCH=0", "TALLY_OSC_REPORTING_URL=http://h", "TALLY_OSC_REPORTING_TOKEN=tok-123456"}
	code, _, errOut := runCmd(t, "", env)
	if code != 2 {
		t.Fatalf("exit %d", code)
	}
	if !strings.Contains(errOut, "TALLY_OSC_PREFETCH") || !strings.Contains(errOut, "must be https") {
		t.Errorf("message: %s", errOut)
	}
	if strings.Contains(errOut, "tok-123456") {
		t.Error("token in the message")
	}
}

func TestPrintConfig(t *testing.T) {
	env := []string{"TALLY_OSC_REPORTING_URL=https://h", "TALLY_OSC_REPORTING_TOKEN=tok-123456", "TALLY_OSC_CONTROL_TOKEN=ctl-987",
		"TALLY_OSC_TRANSPORT_URL=amqp://u:pw-555@h:5672/"}
	code, out, _ := runCmd(t, "", env, "--print-config", "--prefetch", "7")
	if code != 0 {
		t.Fatalf("exit %d", code)
	}
	for _, secret := range []string{"tok-123456", "ctl-987", "pw-555"} {
		if strings.Contains(out, secret) {
			t.Errorf("%s printed:\n%s", secret, out)
		}
	}
	if !strings.Contains(out, "TALLY_OSC_PREFETCH=7\n") || !strings.Contains(out, "TALLY_OSC_REPORTING_TOKEN=[redacted]") {
		t.Errorf("output:\n%s", out)
	}
}

// TestMapCommand maps the end-to-end corpus offline through the built-in
// modules: envelope, bare and dump-line inputs, one document per line or per
// file, and a summary with reasons.
func TestMapCommand(t *testing.T) {
	var items []map[string]any
	b := testkit.ReadFile(t, "../../e2e/testdata/corpus.json")
	if err := json.Unmarshal(b, &items); err != nil {
		t.Fatal(err)
	}
	var lines []string
	for i, it := range items {
		inner := map[string]any{"message_id": "id-" + string(rune('a'+i)), "event_type": it["event_type"], "payload": it["payload"],
			"timestamp": "2024-05-01 12:00:00.123456", "publisher_id": it["publisher_id"], "_context_auth_token": "ctx-secret"}
		ib, _ := json.Marshal(inner)
		switch i % 3 {
		case 0: // the AMQP body
			env, _ := json.Marshal(map[string]string{"oslo.version": "2.0", "oslo.message": string(ib)})
			lines = append(lines, string(env))
		case 1: // a bare message
			lines = append(lines, string(ib))
		case 2: // a --dump line
			inner["exchange"], inner["routing_key"] = it["exchange"], "notifications.info"
			db, _ := json.Marshal(inner)
			lines = append(lines, string(db))
		}
	}
	lines = append(lines, `{"event_type":"compute.metrics.update","payload":{}}`, `not json at all`)
	code, out, errOut := runCmd(t, strings.Join(lines, "\n"), nil, "map")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errOut)
	}
	events := strings.Split(strings.TrimSpace(out), "\n")
	if len(events) != len(items) {
		t.Fatalf("%d events for %d mappable inputs:\n%s", len(events), len(items), out)
	}
	for _, e := range events {
		var ev map[string]any
		if err := json.Unmarshal([]byte(e), &ev); err != nil || ev["event_id"] == nil || ev["service"] == nil {
			t.Fatalf("not an event: %s", e)
		}
	}
	if strings.Contains(out, "ctx-secret") {
		t.Error("a context token reached an event")
	}
	wantSummary := "read 18, mapped 16 (16 events), skipped 1 (unclaimed: 1), unparseable 1 (not_json: 1), failed 0"
	if !strings.Contains(errOut, wantSummary) {
		t.Errorf("summary %q, want %q", errOut, wantSummary)
	}

	// One document per file.
	f := filepath.Join(t.TempDir(), "one.json")
	_ = os.WriteFile(f, []byte(lines[0]), 0o600)
	if code, out, _ := runCmd(t, "", nil, "map", f); code != 0 || strings.Count(out, "\n") != 1 {
		t.Errorf("file input: %d %q", code, out)
	}
	if code, _, _ := runCmd(t, "", nil, "map", "/nonexistent.json"); code == 0 {
		t.Error("an unreadable file must fail")
	}
}

// TestMapperTestCommand runs the built-in mappers' own fixture pairs through
// the compiled modules, and fails on a broken pair.
func TestMapperTestCommand(t *testing.T) {
	code, out, errOut := runCmd(t, "", nil, "mapper", "test", "../../../../mappers/nova/testdata")
	if code != 0 || !strings.Contains(out, " passed, 0 failed") {
		t.Fatalf("exit %d\n%s%s", code, out, errOut)
	}
	dir := t.TempDir()
	in, _ := os.ReadFile("../../../../mappers/nova/testdata/compute.instance.exists__ceilometer__1.in.json")
	_ = os.WriteFile(filepath.Join(dir, "x.in.json"), in, 0o600)
	_ = os.WriteFile(filepath.Join(dir, "x.out.json"), []byte(`{"events":[]}`), 0o600)
	code, out, _ = runCmd(t, "", nil, "mapper", "test", dir)
	if code == 0 || !strings.Contains(out, "0 passed, 1 failed") || !strings.Contains(out, "FAIL") {
		t.Fatalf("a wrong pair passed: %d\n%s", code, out)
	}
}

// TestMapDirectory maps testdata/map-dir, a directory of mixed samples in
// every form map reads (bare messages, an AMQP body, --dump lines, a file
// that is not JSON; a hidden file it must not read), and checks the summary
// by service: mapped types under the module that mapped them, an unclaimed
// type under the module that claims its family (compute.metrics.update under
// nova, designate's dns.zone.* twin under designate), a family no module
// knows under its own name.
func TestMapDirectory(t *testing.T) {
	code, out, errOut := runCmd(t, "", nil, "map", "testdata/map-dir")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errOut)
	}
	if n := strings.Count(out, "\n"); n != 7 {
		t.Errorf("%d events, want 7:\n%s", n, out)
	}
	testkit.WantAll(t, "the events", out, `"service":"nova"`, `"service":"cinder"`, `"service":"designate"`, `"service":"swift"`, `"service":"trove"`, `"service":"ironic"`)
	testkit.WantAll(t, "the summary", errOut,
		"read 11, mapped 7 (7 events), skipped 3 (unclaimed: 3), unparseable 1 (not_json: 1), failed 0\nby service:\n",
		"  (no event type)  read 1, mapped 0 (0 events), unparseable 1 (not_json: 1)\n",
		"  cinder           read 1, mapped 1 (1 events)\n",
		"  designate        read 2, mapped 1 (1 events), skipped 1 (unclaimed: 1)\n",
		"  identity.*       read 1, mapped 0 (0 events), skipped 1 (unclaimed: 1)\n",
		"  ironic           read 1, mapped 1 (1 events)\n",
		"  nova             read 3, mapped 2 (2 events), skipped 1 (unclaimed: 1)\n",
		"  swift            read 1, mapped 1 (1 events)\n",
		"  trove            read 1, mapped 1 (1 events)\n",
	)
	// A file and a directory together; a missing path is an I/O error.
	code, out, _ = runCmd(t, "", nil, "map", "testdata/map-dir/nova", "testdata/map-dir/garbage.txt")
	if code != 0 || strings.Count(out, "\n") != 2 {
		t.Errorf("file and directory: exit %d, %q", code, out)
	}
	if code, _, _ := runCmd(t, "", nil, "map", "testdata/map-dir/none"); code == 0 {
		t.Error("a missing path exited 0")
	}
}

// TestMapperTestRunsEachFixtureTwice: a drop-in module whose event_id changes
// from one call to the next (a counter kept across calls) passes a single
// run of its fixture but fails mapper test, which maps every input twice.
func TestMapperTestRunsEachFixtureTwice(t *testing.T) {
	wasm := testkit.WAT(t, "../../../../runtime/testdata", "counter")
	dir := t.TempDir()
	_ = os.WriteFile(filepath.Join(dir, "counter.wasm"), wasm, 0o644)
	_ = os.WriteFile(filepath.Join(dir, "x.in.json"), []byte(`{"event_type":"test.x","message_id":"a"}`), 0o644)
	_ = os.WriteFile(filepath.Join(dir, "x.out.json"), []byte(`{"events":[{"event_type":"test.count","event_id":"n1"}]}`), 0o644)
	code, out, errOut := runCmd(t, "", nil, "mapper", "test", "--mappers", dir)
	if code == 0 || !strings.Contains(out, "0 passed, 1 failed") || !strings.Contains(out, "second time") {
		t.Fatalf("a mapper that maps the same input differently passed: %d\n%s%s", code, out, errOut)
	}
}
