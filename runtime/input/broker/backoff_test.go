package broker

import (
	"testing"
	"time"
)

// TestReconnectBackoffIsFullJitter: the reconnect delay is drawn over the
// whole step, [0, step], as documented, not over its upper half.
func TestReconnectBackoffIsFullJitter(t *testing.T) {
	o := Options{ReconnectMin: time.Second, ReconnectMax: 4 * time.Second}
	b := o.reconnectBackoff()
	below := 0
	for range 200 {
		b.Reset()
		if d := b.Next(); d < time.Second/2 {
			below++
		} else if d > time.Second {
			t.Fatalf("first delay %v above the step", d)
		}
	}
	if below == 0 {
		t.Fatal("no delay below half the step in 200 draws: not full jitter")
	}
}

// Probes and pauses follow their steps exactly, doubling to the cap.
func TestProbeAndPauseSchedules(t *testing.T) {
	var o Options
	o.setDefaults()
	for _, c := range []struct {
		name string
		next func() time.Duration
		want []time.Duration
	}{
		{"probe", o.probeBackoff().Next, []time.Duration{1, 2, 4, 8, 16, 32, 60, 60}},
		{"pause", o.pauseBackoff().Next, []time.Duration{1, 2, 4, 8, 10, 10}},
	} {
		for i, w := range c.want {
			if d := c.next(); d != w*time.Second {
				t.Fatalf("%s: delay %d is %v, want %v", c.name, i, d, w*time.Second)
			}
		}
	}
}
