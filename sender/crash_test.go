package sender_test

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"syscall"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/tally-billing/tally-openstack-collector/internal/testkit"
	"github.com/tally-billing/tally-openstack-collector/outbox"
	"github.com/tally-billing/tally-openstack-collector/sender"
)

const (
	envCrashDir = "TALLY_OSC_SENDER_CRASH_DIR"
	envCrashURL = "TALLY_OSC_SENDER_CRASH_URL"
)

// killOnDelete is the real outbox, except that the process dies with
// SIGKILL at the moment the sender deletes a batch the API accepted.
type killOnDelete struct{ *outbox.Outbox }

func (k killOnDelete) Delivered(context.Context, uint64, uint64, int) error {
	syscall.Kill(os.Getpid(), syscall.SIGKILL)
	select {}
}

// The test binary is also the child process of TestKill9AfterOKBeforeDelete
// and of BenchmarkSenderToLoopbackAPI.
func TestMain(m *testing.M) {
	if dir := os.Getenv(envCrashDir); dir != "" {
		os.Exit(senderCrashChild(dir))
	}
	if dir := os.Getenv(envAPIChild); dir != "" {
		os.Exit(reportingAPIChild(dir))
	}
	os.Exit(m.Run())
}

// senderCrashChild is the child of TestKill9AfterOKBeforeDelete: it sends
// until the delete after the first accepted batch kills it.
func senderCrashChild(dir string) int {
	ob, err := outbox.Open(outbox.Options{Dir: dir, Logger: zerolog.Nop(), MinFreeBytes: -1})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 2
	}
	s, err := sender.New(killOnDelete{ob}, sender.Options{URL: os.Getenv(envCrashURL), Token: token, Insecure: true, BatchMax: 100})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 2
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	s.Flush(ctx)
	fmt.Fprintln(os.Stderr, "not killed")
	return 2
}

// The sender dies after the API answered 200 and before the delete: after
// the restart the batch is sent again, counted as duplicates, nothing lost.
func TestKill9AfterOKBeforeDelete(t *testing.T) {
	e := newEnv(t)
	e.append(t, 0, 300, 50)
	e.ob.Close()
	cmd := exec.Command(os.Args[0])
	cmd.Env = append(os.Environ(), envCrashDir+"="+e.dir, envCrashURL+"="+e.ts.URL)
	err := cmd.Run()
	ws, ok := cmd.ProcessState.Sys().(syscall.WaitStatus)
	if !ok || ws.Signal() != syscall.SIGKILL {
		t.Fatalf("child did not die of SIGKILL: %v", err)
	}
	if st := e.stats(t); st.Accepted != 100 {
		t.Fatalf("before the restart the API holds %d events, want the first batch (100)", st.Accepted)
	}
	ob, err := outbox.Open(outbox.Options{Dir: e.dir, Logger: zerolog.Nop(), MinFreeBytes: -1})
	if err != nil {
		t.Fatal(err)
	}
	defer ob.Close()
	if ob.Depth() != 300 {
		t.Fatalf("depth %d after the crash, want 300", ob.Depth())
	}
	s, err := sender.New(ob, sender.Options{URL: e.ts.URL, Token: token, Insecure: true, BatchMax: 100, Logger: zerolog.Nop()})
	if err != nil {
		t.Fatal(err)
	}
	flush(t, s, 10*time.Second)
	st := e.stats(t)
	if st.Accepted != 300 || st.Duplicates != 100 || ob.Depth() != 0 {
		t.Fatalf("after the restart: %+v depth %d; want 300 accepted, 100 duplicates", st, ob.Depth())
	}
	if ids := listIDs(t, e.ts.URL); len(ids) != 300 {
		t.Fatalf("%d distinct events listed", len(ids))
	}
	// The ledger counts each event delivered once; the 100 sent again are
	// the API's duplicates but no copies: what the ledger expects the API
	// to hold is what it holds.
	d := testkit.WholeLedger(t, ob)
	var delivered, copies, dups int64
	for _, c := range d.Stored {
		delivered += c.Delivered
		copies += c.Copies
	}
	for _, c := range d.Intake {
		dups += c.Duplicates
	}
	if delivered != 300 || copies != 0 || dups != 100 || delivered-copies != st.Accepted {
		t.Fatalf("ledger: %d delivered, %d copies, %d duplicates; the API holds %d", delivered, copies, dups, st.Accepted)
	}
}
