package outbox_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/rs/zerolog"

	"github.com/tally-billing/tally-openstack-collector/internal/testkit"
	"github.com/tally-billing/tally-openstack-collector/outbox"
)

const (
	envDamageDir   = "TALLY_OSC_OUTBOX_DAMAGE_DIR"
	envDamageClose = "TALLY_OSC_OUTBOX_DAMAGE_CLOSE"

	damageEvents = 1000
	bigLetter    = 2 << 20 // too large for the tree: it goes to the value log
)

// damageChild is the child of TestDamagedFilesRefusedOrRecovered (TestMain
// runs it): it commits 1,000 events in 50 appends and three dead letters, one
// of them in the value log, then dies with SIGKILL (or closes, with the
// variable set).
func damageChild(dir string) {
	fail := func(err error) {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(2)
	}
	ctx := context.Background()
	o, err := outbox.Open(outbox.Options{Dir: dir, Logger: zerolog.Nop(), MinFreeBytes: -1})
	if err != nil {
		fail(err)
	}
	for i := range 50 {
		if err := o.Append(ctx, events(i*20, 20, 300)); err != nil {
			fail(err)
		}
		if i == 10 || i == 25 || i == 40 {
			body := []byte(fmt.Sprintf(`{"n":%d}`, i))
			if i == 25 {
				body = bytes.Repeat([]byte("x"), bigLetter)
			}
			if err := o.AppendDeadLetters(ctx, []outbox.DeadLetter{{Body: body, Reason: "trap"}}); err != nil {
				fail(err)
			}
		}
	}
	if os.Getenv(envDamageClose) != "" {
		if err := o.Close(); err != nil {
			fail(err)
		}
		os.Exit(0)
	}
	syscall.Kill(os.Getpid(), syscall.SIGKILL)
	select {}
}

// dataEnd is the length of f up to its last byte that is not zero (Badger
// preallocates its logs).
func dataEnd(t *testing.T, path string) int64 {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	for i := len(b) - 1; i >= 0; i-- {
		if b[i] != 0 {
			return int64(i + 1)
		}
	}
	return 0
}

func onlyFile(t *testing.T, dir, pattern string) string {
	t.Helper()
	m, _ := filepath.Glob(filepath.Join(dir, pattern))
	if len(m) != 1 {
		t.Fatalf("%s in %s: %v", pattern, dir, m)
	}
	return m[0]
}

func garble(t *testing.T, path string, at int64, n int) {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	for i := at; i < at+int64(n) && i < int64(len(b)); i++ {
		b[i] ^= 0x5a
	}
	if err := os.WriteFile(path, b, 0o600); err != nil {
		t.Fatal(err)
	}
}

// Damage to the files of a real outbox (a truncated value log or memory
// table, a garbled memory table, a damaged MANIFEST), after a crash and
// after a clean stop: Open either recovers with every committed event and
// dead letter readable, or refuses with ErrCorrupt naming the recovery
// section of docs/outbox.md. After a refusal, ACCEPT-DAMAGE in the
// directory starts it with what is left, counting what is missing.
func TestDamagedFilesRefusedOrRecovered(t *testing.T) {
	type damage struct {
		name   string
		damage func(t *testing.T, dir string)
		refuse bool // the damage loses committed data, so Open must refuse
	}
	// cut truncates the one file that matches pattern to to(the end of its
	// data): its tail less n bytes, or half of it.
	cut := func(pattern string, to func(end int64) int64) func(*testing.T, string) {
		return func(t *testing.T, dir string) {
			p := onlyFile(t, dir, pattern)
			os.Truncate(p, to(dataEnd(t, p)))
		}
	}
	less := func(n int64) func(int64) int64 { return func(end int64) int64 { return end - n } }
	half := func(end int64) int64 { return end / 2 }
	crashed := []damage{
		{"none", func(*testing.T, string) {}, false},
		{"value log tail cut", cut("*.vlog", less(1024)), true},
		{"value log cut to half", cut("*.vlog", half), true},
		{"memory table tail cut", cut("*.mem", less(100)), true},
		{"memory table cut to half", cut("*.mem", half), true},
		{"memory table garbled", func(t *testing.T, dir string) {
			p := onlyFile(t, dir, "*.mem")
			garble(t, p, dataEnd(t, p)*3/10, 16)
		}, true},
		{"memory table's zeroed end garbled", func(t *testing.T, dir string) {
			// Past the last entry: a write that never completed.
			p := onlyFile(t, dir, "*.mem")
			garble(t, p, dataEnd(t, p)+10, 16)
		}, false},
		{"MANIFEST garbled", func(t *testing.T, dir string) {
			garble(t, filepath.Join(dir, "MANIFEST"), 10, 4)
		}, true},
	}
	closed := []damage{
		{"none", func(*testing.T, string) {}, false},
		{"MANIFEST cut to its header", func(t *testing.T, dir string) {
			os.Truncate(filepath.Join(dir, "MANIFEST"), 8)
		}, true},
		{"MANIFEST tail cut", func(t *testing.T, dir string) {
			p := filepath.Join(dir, "MANIFEST")
			fi, _ := os.Stat(p)
			os.Truncate(p, fi.Size()-10)
		}, true},
		{"MANIFEST checksum", func(t *testing.T, dir string) {
			p := filepath.Join(dir, "MANIFEST")
			fi, _ := os.Stat(p)
			garble(t, p, fi.Size()-3, 1)
		}, true},
		{"value log tail cut", cut("000001.vlog", less(1024)), true},
	}
	for _, run := range []struct {
		name  string
		close bool
		cases []damage
	}{{"after a crash", false, crashed}, {"after a clean stop", true, closed}} {
		t.Run(run.name, func(t *testing.T) {
			base := t.TempDir()
			cmd := child(envDamageDir + "=" + base)
			if run.close {
				cmd.Env = append(cmd.Env, envDamageClose+"=1")
			}
			out, err := cmd.CombinedOutput()
			if ws, ok := cmd.ProcessState.Sys().(syscall.WaitStatus); run.close && err != nil || !run.close && !(ok && ws.Signaled()) {
				t.Fatalf("child: %v\n%s", err, out)
			}
			for _, c := range run.cases {
				t.Run(c.name, func(t *testing.T) {
					dir := t.TempDir()
					if out, err := exec.Command("cp", "-a", base+"/.", dir).CombinedOutput(); err != nil {
						t.Fatalf("cp: %v %s", err, out)
					}
					c.damage(t, dir)
					checkDamaged(t, dir, c.refuse)
				})
			}
		})
	}
}

func checkDamaged(t *testing.T, dir string, refuse bool) {
	t.Helper()
	ctx := context.Background()
	opts := outbox.Options{Dir: dir, Logger: zerolog.Nop(), MinFreeBytes: -1}
	o, err := outbox.Open(opts)
	if err == nil {
		defer o.Close()
		if refuse {
			t.Fatalf("opened: depth %d, dead letters %d; want a refusal", o.Depth(), o.DeadLetterCount())
		}
		// Recovered: everything committed is there.
		f, l, evs, err := o.Peek(ctx, 2*damageEvents)
		if err != nil || f != 1 || l != damageEvents || len(evs) != damageEvents {
			t.Fatalf("recovered %d events (%d..%d), %v", len(evs), f, l, err)
		}
		for i, ev := range evs {
			if !bytes.Equal(ev, events(i, 1, 300)[0]) {
				t.Fatalf("event %d differs", i)
			}
		}
		dls, err := o.ListDeadLetters(ctx, 0, 10)
		if err != nil || len(dls) != 3 || len(dls[1].Body) != bigLetter {
			t.Fatalf("dead letters: %d, %v", len(dls), err)
		}
		return
	}
	if !errors.Is(err, outbox.ErrCorrupt) || !strings.Contains(err.Error(), `docs/outbox.md, "When the store is damaged"`) {
		t.Fatalf("open: %v; want ErrCorrupt naming the recovery section", err)
	}
	t.Logf("refused: %v", err)
	if !strings.Contains(err.Error(), "ACCEPT-DAMAGE") {
		// Badger itself cannot open it: salvaging is the way (docs).
		return
	}
	// The operator accepts what is left.
	if err := os.WriteFile(filepath.Join(dir, "ACCEPT-DAMAGE"), nil, 0o600); err != nil {
		t.Fatal(err)
	}
	reg := prometheus.NewRegistry()
	opts.Registerer = reg
	o, err = outbox.Open(opts)
	if err != nil {
		t.Fatalf("open with ACCEPT-DAMAGE: %v", err)
	}
	if _, err := os.Stat(filepath.Join(dir, "ACCEPT-DAMAGE")); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("ACCEPT-DAMAGE left in place: %v", err)
	}
	depth := o.Depth()
	// What is missing is counted as lost, and only that.
	if lost := testkit.Metric(t, reg, "tally_collector_outbox_damaged_events_total"); depth+int64(lost) != damageEvents {
		t.Fatalf("depth %d and %v counted as lost, want %d in all", depth, lost, damageEvents)
	}
	dls, err := o.ListDeadLetters(ctx, 0, 10)
	if err != nil {
		t.Fatalf("dead letters after accepting: %v", err)
	}
	for _, d := range dls {
		if _, err := o.GetDeadLetter(ctx, d.Seq); err != nil {
			t.Fatalf("dead letter %d unreadable after accepting: %v", d.Seq, err)
		}
	}
	if err := o.Append(ctx, events(5000, 3, 300)); err != nil {
		t.Fatal(err)
	}
	o.Close()
	// Accepted once: the next start is clean.
	o, err = outbox.Open(outbox.Options{Dir: dir, Logger: zerolog.Nop(), MinFreeBytes: -1})
	if err != nil {
		t.Fatalf("reopen after accepting: %v", err)
	}
	if o.Depth() != depth+3 {
		t.Fatalf("depth %d after reopen, want %d", o.Depth(), depth+3)
	}
	o.Close()
}

// ACCEPT-DAMAGE left in a sound store is removed at Open, so that it cannot
// accept damage found at a later start without the operator's say.
func TestAcceptDamageLeftOverIsRemoved(t *testing.T) {
	dir := t.TempDir()
	o := open(t, dir)
	o.Close()
	if err := os.WriteFile(filepath.Join(dir, "ACCEPT-DAMAGE"), nil, 0o600); err != nil {
		t.Fatal(err)
	}
	o = open(t, dir)
	o.Close()
	if _, err := os.Stat(filepath.Join(dir, "ACCEPT-DAMAGE")); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("ACCEPT-DAMAGE kept: %v", err)
	}
}

// A damaged COMMITTED record is not damage to the store: the start goes on,
// with a warning, and the record is written anew.
func TestDamagedRecordOfCommitsIsOnlyAWarning(t *testing.T) {
	dir := t.TempDir()
	o := open(t, dir)
	if err := o.Append(context.Background(), events(0, 10, 100)); err != nil {
		t.Fatal(err)
	}
	o.Close()
	garble(t, filepath.Join(dir, "COMMITTED"), 6, 2)
	var log bytes.Buffer
	o, err := outbox.Open(outbox.Options{Dir: dir, Logger: zerolog.New(&log), MinFreeBytes: -1})
	if err != nil {
		t.Fatal(err)
	}
	if o.Depth() != 10 || !strings.Contains(log.String(), "cannot check the store for lost events") {
		t.Fatalf("depth %d, log %s", o.Depth(), log.String())
	}
	o.Close()
	o = open(t, dir)
	o.Close()
}
