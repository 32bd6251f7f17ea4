package client

import "testing"

// The names of states and modes, as the seed's state_str and mode_str give
// them, and a readable form for values out of range.
func TestStateAndModeStrings(t *testing.T) {
	states := map[State]string{
		StateDisconnected: "disconnected", StateConnecting: "connecting", StateConnected: "connected",
		StateClosing: "closing", StateClosed: "closed", State(9): "state(9)",
	}
	for s, want := range states {
		if got := s.String(); got != want {
			t.Errorf("State(%d).String() = %q, want %q", int32(s), got, want)
		}
	}
	modes := map[Mode]string{ModePublish: "PUBLISH", ModeSubscribe: "SUBSCRIBE", ModeBidir: "BIDIR", Mode(0): "mode(0)", Mode(8): "mode(8)"}
	for m, want := range modes {
		if got := m.String(); got != want {
			t.Errorf("Mode(%d).String() = %q, want %q", uint8(m), got, want)
		}
	}
}
