package runtime_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/tally-billing/tally-openstack-collector/runtime"
)

const goClockRand = "wasm-sdk/testdata/clockrand.wasm" // reads the clocks and crypto/rand, sleeps

// mapOnce runs one call and returns its only event.
func mapOnce(t *testing.T, m *runtime.Module, doc string) string {
	t.Helper()
	res, err := m.Map(context.Background(), index(t, doc), src)
	if err != nil {
		t.Fatalf("map %s: %v", doc, err)
	}
	if len(res.Events) != 1 {
		t.Fatalf("map %s: %d events", doc, len(res.Events))
	}
	return string(res.Events[0])
}

// TestGuestSeesNoRealClockNorRandomness: a guest that reads the time and
// crypto/rand maps the same input to the same event, on the same instance and
// on a fresh one: walltime starts every call at 2000-01-01T00:00:00Z, and the
// random bytes are seeded from the input.
func TestGuestSeesNoRealClockNorRandomness(t *testing.T) {
	wasm := guest(t, goClockRand)
	e := newEngine(t, runtime.Config{PoolSize: 1})
	m, err := e.Load(context.Background(), goClockRand, wasm)
	if err != nil {
		t.Fatal(err)
	}
	const doc = `{"event_type":"x.y","message_id":"m1"}`
	first := mapOnce(t, m, doc)
	time.Sleep(20 * time.Millisecond) // real time passes between the calls
	if again := mapOnce(t, m, doc); again != first {
		t.Fatalf("the same input mapped twice differs:\n%s\n%s", first, again)
	}
	if !strings.Contains(first, `"now":"2000-01-01T00:00:00Z"`) {
		t.Errorf("walltime at the start of a call: %s", first)
	}
	other := mapOnce(t, m, `{"event_type":"x.y","message_id":"m2"}`)
	if idOf(other) == idOf(first) {
		t.Errorf("two inputs drew the same random bytes: %s", idOf(first))
	}
	m2, err := e.Load(context.Background(), goClockRand, wasm)
	if err != nil {
		t.Fatal(err)
	}
	if fresh := mapOnce(t, m2, doc); fresh != first {
		t.Fatalf("a fresh instance maps differently:\n%s\n%s", first, fresh)
	}
}

func idOf(ev string) string {
	_, rest, _ := strings.Cut(ev, `"event_id":"`)
	id, _, _ := strings.Cut(rest, `"`)
	return id
}

// TestGuestSleepIsVirtualAndEndsAtTheDeadline: a guest's sleep takes no real
// time and advances the guest's clocks by exactly its length; a sleep that
// would pass the call's deadline ends the call there, with a timeout. On real
// clocks a one-hour sleep held the call (and its delivery) for an hour: the
// deadline could not interrupt it.
func TestGuestSleepIsVirtualAndEndsAtTheDeadline(t *testing.T) {
	wasm := guest(t, goClockRand)
	e := newEngine(t, runtime.Config{PoolSize: 1, CallTimeout: 250 * time.Millisecond})
	m, err := e.Load(context.Background(), goClockRand, wasm)
	if err != nil {
		t.Fatal(err)
	}
	if ev := mapOnce(t, m, `{"event_type":"x.y","sleep_ms":100}`); !strings.Contains(ev, `"slept":"100000000"`) {
		t.Errorf("a 100 ms sleep within the deadline: %s", ev)
	}
	done := make(chan error, 1)
	go func() {
		_, err := m.Map(context.Background(), index(t, `{"event_type":"x.y","sleep_ms":3600000}`), src)
		done <- err
	}()
	select {
	case err := <-done:
		var me *runtime.MapError
		if !errors.As(err, &me) || me.Reason != runtime.ReasonTimeout {
			t.Fatalf("a one-hour sleep: %v, want a timeout", err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("a one-hour sleep still holds the call after 30 s")
	}
	// The module serves the next call.
	if ev := mapOnce(t, m, `{"event_type":"x.y"}`); !strings.Contains(ev, `"slept":"0"`) {
		t.Errorf("after the timeout: %s", ev)
	}
}
