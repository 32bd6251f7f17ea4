package broker

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/tally-billing/tally-openstack-collector/internal/backoff"
)

// The loop the consumer and the control link share: every session's end is
// reported, the backoff restarts only after a steady session, a severe error
// is logged at error level, and a cancelled context ends the loop with nil.
func TestReconnectLoop(t *testing.T) {
	errSevere := errors.New("severe")
	var logs bytes.Buffer
	log := zerolog.New(&logs)
	bo := backoff.New(backoff.Policy{Min: time.Microsecond, Max: time.Millisecond})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()

	results := []struct {
		steady bool
		err    error
	}{
		{false, errors.New("refused")},
		{false, fmt.Errorf("declare: %w", errSevere)},
		{true, errors.New("lost")},
		{false, errors.New("refused again")},
	}
	var ended []string
	var attempts []int
	n := 0
	err := reconnectLoop{
		running: new(atomic.Bool),
		bo:      bo,
		session: func(context.Context) (bool, error) {
			attempts = append(attempts, bo.Attempts())
			if n == len(results) {
				cancel()
				return false, context.Canceled
			}
			r := results[n]
			n++
			return r.steady, r.err
		},
		ended: func(ctx context.Context, err error) {
			ended = append(ended, fmt.Sprintf("%v/%v", err, ctx.Err() != nil))
		},
		log:    &log,
		msg:    "session ended",
		severe: []error{errSevere},
	}.run(ctx)
	if err != nil {
		t.Fatalf("run = %v, want nil once ctx is done", err)
	}
	want := []string{"refused/false", "declare: severe/false", "lost/false", "refused again/false", "context canceled/true"}
	if strings.Join(ended, " ") != strings.Join(want, " ") {
		t.Errorf("ended %q, want %q", ended, want)
	}
	// Attempts before each session: 0, 1, 2, then reset after the steady one.
	if fmt.Sprint(attempts) != "[0 1 2 1 2]" {
		t.Errorf("backoff attempts before each session %v, want [0 1 2 1 2]", attempts)
	}
	lines := strings.Split(strings.TrimSpace(logs.String()), "\n")
	if len(lines) != 4 {
		t.Fatalf("%d log lines, want 4: %s", len(lines), logs.String())
	}
	for i, l := range lines {
		wantLevel := `"level":"warn"`
		if i == 1 {
			wantLevel = `"level":"error"`
		}
		if !strings.Contains(l, wantLevel) || !strings.Contains(l, `"retry_in"`) {
			t.Errorf("log line %d %s: want %s and retry_in", i, l, wantLevel)
		}
	}
}

// A context that ends during the wait ends the loop at once, and stopped
// is called.
func TestReconnectLoopStopsDuringTheWait(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	// The log line is written just before the wait: it ends the context.
	log := zerolog.New(cancelWriter(cancel))
	stopped := false
	err := reconnectLoop{
		running: new(atomic.Bool),
		bo:      backoff.New(backoff.Policy{Min: time.Hour, Max: time.Hour}),
		session: func(context.Context) (bool, error) {
			return false, errors.New("refused")
		},
		ended:   func(context.Context, error) {},
		stopped: func() { stopped = true },
		log:     &log,
	}.run(ctx)
	if err != nil || !stopped {
		t.Errorf("run = %v, stopped %v; want nil and true", err, stopped)
	}
}

// A loop runs once: Run called again (the consumer's or the link's) returns
// ErrOptions without a session.
func TestReconnectLoopRunsOnce(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	log := zerolog.Nop()
	sessions := 0
	loop := reconnectLoop{
		running: new(atomic.Bool),
		bo:      backoff.New(backoff.Policy{Min: time.Hour, Max: time.Hour}),
		session: func(context.Context) (bool, error) {
			sessions++
			return false, context.Canceled
		},
		ended: func(context.Context, error) {},
		log:   &log,
	}
	if err := loop.run(ctx); err != nil {
		t.Fatalf("first run = %v, want nil", err)
	}
	if err := loop.run(ctx); !errors.Is(err, ErrOptions) {
		t.Errorf("second run = %v, want ErrOptions", err)
	}
	if sessions != 1 {
		t.Errorf("%d sessions, want 1", sessions)
	}
}

type cancelWriter context.CancelFunc

func (c cancelWriter) Write(p []byte) (int, error) { c(); return len(p), nil }
