package outbox_test

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/tally-billing/tally-openstack-collector/internal/testkit"
	"github.com/tally-billing/tally-openstack-collector/outbox"
)

const (
	envKillDir   = "TALLY_OSC_OUTBOX_KILL9_DIR"
	envKillStart = "TALLY_OSC_OUTBOX_KILL9_START"
)

// The test binary is also the child process of TestKill9LosesNoCommittedEvent
// and of TestDamagedFilesRefusedOrRecovered.
func TestMain(m *testing.M) {
	if dir := os.Getenv(envKillDir); dir != "" {
		kill9Child(dir)
	}
	if dir := os.Getenv(envDamageDir); dir != "" {
		damageChild(dir)
	}
	if dir := os.Getenv(envLedgerKillDir); dir != "" {
		ledgerKillChild(dir)
	}
	if dir := os.Getenv(envLeftOpenDir); dir != "" {
		leftOpenChild(dir)
	}
	os.Exit(m.Run())
}

// child is the test binary as a child process, with env added to its
// environment: TestMain hands it to the part the variable names.
func child(env ...string) *exec.Cmd {
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), env...)
	return cmd
}

// startChild starts cmd and answers its standard output.
func startChild(t *testing.T, cmd *exec.Cmd) io.Reader {
	t.Helper()
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	return out
}

// wantKilled waits for cmd and fails the test unless SIGKILL ended it.
func wantKilled(t *testing.T, cmd *exec.Cmd) {
	t.Helper()
	st, _ := cmd.Process.Wait()
	if ws, ok := st.Sys().(syscall.WaitStatus); !ok || ws.Signal() != syscall.SIGKILL {
		t.Fatalf("child did not die of SIGKILL: %v", st)
	}
}

// kill9Child is the child of TestKill9LosesNoCommittedEvent: it appends and
// drains until it is killed, reporting on stdout what returned nil.
func kill9Child(dir string) {
	start, _ := strconv.Atoi(os.Getenv(envKillStart))
	ctx := context.Background()
	o, err := outbox.Open(outbox.Options{Dir: dir, Logger: zerolog.Nop(), MinFreeBytes: -1, ReclaimAfterBytes: 256 << 10})
	if err != nil {
		fmt.Printf("K9 error %v\n", err)
		os.Exit(2)
	}
	go func() { // the drain: report the index range before and after each delete
		for {
			f, l, evs, err := o.Peek(ctx, 70)
			if err != nil || len(evs) == 0 {
				time.Sleep(time.Millisecond)
				continue
			}
			lo, hi := indexOf(evs[0]), indexOf(evs[len(evs)-1])
			fmt.Printf("K9 deleting %d %d\n", lo, hi)
			if err := o.Delete(ctx, f, l); err == nil {
				fmt.Printf("K9 deleted %d %d\n", lo, hi)
			}
			time.Sleep(3 * time.Millisecond)
		}
	}()
	for n := start; ; {
		size := 1 + n%97
		if err := o.Append(ctx, events(n, size, 300)); err != nil {
			fmt.Printf("K9 error %v\n", err)
			os.Exit(2)
		}
		n += size
		fmt.Printf("K9 acked %d\n", n) // every index below n is committed
	}
}

func indexOf(ev []byte) int {
	var n int
	fmt.Sscanf(string(ev), `{"event_id":"ev-%d"`, &n)
	return n
}

// A process killed with SIGKILL at arbitrary points loses no event whose
// Append returned nil, and no event reappears that a completed Delete
// removed.
func TestKill9LosesNoCommittedEvent(t *testing.T) {
	if testing.Short() {
		t.Skip("spawns processes")
	}
	dir := t.TempDir()
	acked := 0
	deleted := map[int]bool{}  // confirmed deleted
	inflight := map[int]bool{} // delete started, not confirmed
	for round := range 4 {
		cmd := child(envKillDir+"="+dir, envKillStart+"="+strconv.Itoa(acked))
		out := startChild(t, cmd)
		lines := make(chan string, 1024)
		go func() {
			sc := bufio.NewScanner(out)
			for sc.Scan() {
				lines <- sc.Text()
			}
			close(lines)
		}()
		// Kill at a different point each round, once the child got going.
		killAt := acked + 300 + round*500
		timeout := time.After(20 * time.Second)
	read:
		for {
			if killAt > 0 && acked >= killAt {
				cmd.Process.Signal(syscall.SIGKILL)
				killAt = 0
			}
			select {
			case <-timeout:
				cmd.Process.Signal(syscall.SIGKILL)
				t.Fatal("child made no progress in 20s")
			case l, ok := <-lines:
				if !ok {
					break read
				}
				f := strings.Fields(l)
				if len(f) < 2 || f[0] != "K9" {
					continue
				}
				switch f[1] {
				case "acked":
					acked, _ = strconv.Atoi(f[2])
				case "deleting", "deleted":
					lo, _ := strconv.Atoi(f[2])
					hi, _ := strconv.Atoi(f[3])
					for i := lo; i <= hi; i++ {
						if f[1] == "deleting" {
							inflight[i] = true
						} else {
							deleted[i] = true
							delete(inflight, i)
						}
					}
				case "error":
					t.Fatalf("child: %s", l)
				}
			}
		}
		wantKilled(t, cmd)

		o := open(t, dir)
		present := map[int]bool{}
		var prev uint64
		err := drainAll(o, func(seq uint64, ev []byte) {
			if seq <= prev {
				t.Fatalf("sequence order broken: %d after %d", seq, prev)
			}
			prev = seq
			present[indexOf(ev)] = true
		})
		if err != nil {
			t.Fatal(err)
		}
		missing := 0
		for i := 0; i < acked; i++ {
			if !present[i] && !deleted[i] && !inflight[i] {
				missing++
			}
			if present[i] && deleted[i] {
				t.Fatalf("round %d: event %d came back after a completed delete", round, i)
			}
		}
		if missing > 0 {
			t.Fatalf("round %d: %d acknowledged events lost (acked %d)", round, missing, acked)
		}
		if int64(len(present)) != o.Depth() {
			t.Fatalf("depth %d but %d events read", o.Depth(), len(present))
		}
		t.Logf("round %d: killed after %d acked events; %d buffered, %d delivered", round, acked, len(present), len(deleted))
		o.Close()
		// Events present beyond the last ack were committed but not yet
		// reported: the next child continues after them.
		for i := range present {
			acked = max(acked, i+1)
		}
	}
	if acked < 800 {
		t.Fatalf("only %d events appended over all rounds: the child barely ran", acked)
	}
}

// drainAll reads every buffered event without deleting it.
func drainAll(o *outbox.Outbox, fn func(seq uint64, ev []byte)) error {
	// Peek always starts at the cursor, so read through a fresh range walk:
	// peek big enough to hold everything.
	f, _, evs, err := o.Peek(context.Background(), int(o.Depth())+1)
	if err != nil {
		return err
	}
	for i, e := range evs {
		fn(f+uint64(i), e)
	}
	return nil
}

// On a full filesystem inserts are refused with ErrRefused, nothing already
// committed is damaged, and inserts resume once space returns.
func TestDiskFullRefusesThenResumes(t *testing.T) {
	mnt := t.TempDir()
	if err := syscall.Mount("tmpfs", mnt, "tmpfs", 0, "size=48m"); err != nil {
		testkit.Missing(t, "cannot mount a small tmpfs to fill (mount: %v): run the tests as root (CAP_SYS_ADMIN)", err)
	}
	t.Cleanup(func() { syscall.Unmount(mnt, syscall.MNT_DETACH) })
	ballast := filepath.Join(mnt, "ballast")
	if err := os.WriteFile(ballast, make([]byte, 12<<20), 0o600); err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	dir := filepath.Join(mnt, "outbox")
	// The reserve is the default for these memory tables (16 of them): what a
	// compaction, at Close above all, may write before it frees its inputs.
	// A smaller one let a Close under load write past the end of the tmpfs
	// (SIGBUS in Badger's table builder).
	opts := outbox.Options{Dir: dir, Logger: zerolog.Nop(), MemTableBytes: 1 << 20}
	o, err := outbox.Open(opts)
	if err != nil {
		t.Fatal(err)
	}
	acked := 0
	var refusal error
	for acked < 200_000 {
		if err := o.Append(ctx, events(acked, 200, 600)); err != nil {
			refusal = err
			break
		}
		acked += 200
	}
	if !errors.Is(refusal, outbox.ErrRefused) || errors.Is(refusal, outbox.ErrFull) {
		t.Fatalf("filling the disk ended with %v after %d events, want ErrRefused", refusal, acked)
	}
	if o.Healthy() == nil {
		t.Fatal("outbox healthy while it refuses inserts")
	}
	t.Logf("refused after %d events: %v", acked, refusal)
	// Nothing committed is damaged: reopen and read everything back.
	if err := o.Close(); err != nil {
		t.Fatal(err)
	}
	if o, err = outbox.Open(opts); err != nil {
		t.Fatalf("reopen on a full disk: %v", err)
	}
	defer o.Close()
	if o.Depth() != int64(acked) {
		t.Fatalf("depth %d after reopen, %d acknowledged", o.Depth(), acked)
	}
	n := 0
	if err := drainAll(o, func(_ uint64, ev []byte) {
		if indexOf(ev) != n {
			t.Fatalf("event %d reads back as %d", n, indexOf(ev))
		}
		n++
	}); err != nil {
		t.Fatal(err)
	}
	if n != acked {
		t.Fatalf("read back %d of %d", n, acked)
	}
	// Closing compacted a little; fill again up to the refusal.
	for extra := 0; ; extra += 100 {
		err := o.Append(ctx, events(acked, 100, 600))
		if errors.Is(err, outbox.ErrRefused) {
			break
		}
		if err != nil || extra > 20_000 {
			t.Fatalf("refilling the disk: %v after %d more events", err, extra)
		}
		acked += 100
	}
	// Space returns.
	if err := os.Remove(ballast); err != nil {
		t.Fatal(err)
	}
	if err := o.Healthy(); err != nil {
		t.Fatalf("not healthy once space returned: %v", err)
	}
	if err := o.Append(ctx, events(acked, 100, 600)); err != nil {
		t.Fatalf("append once space returned: %v", err)
	}
	if o.Depth() != int64(acked+100) {
		t.Fatalf("depth %d, want %d", o.Depth(), acked+100)
	}
}
