package plog

import (
	"math/bits"
	"net/netip"
	"time"
)

// Hole detection: per client (address and port), message ids are expected to
// increase by one per message. Each client has a window of 64 ids starting at
// the lowest id not yet settled; an id arriving out of order inside the window
// fills its slot. When a newer id pushes the window forward, every slot pushed
// out unfilled is a hole (holes_from_new_message). When a client has been quiet
// for the idle time, the unfilled slots below its highest id are holes too
// (holes_from_dead_port). A jump of more than maxHoleGap ids is taken as a
// client that restarted with a new numbering: the window restarts, and nothing
// is counted.
const (
	holeWindow  = 64
	maxHoleGap  = 1 << 16
	maxHolePort = 16384
)

type portWindow struct {
	base uint32
	seen uint64 // bit i: id base+i was seen
	last time.Time
}

type holes struct {
	idle  time.Duration
	st    *stats
	ports map[netip.AddrPort]*portWindow
	swept time.Time
}

func newHoles(idle time.Duration, st *stats) *holes {
	return &holes{idle: idle, st: st, ports: make(map[netip.AddrPort]*portWindow)}
}

// observe records message id from a client.
func (h *holes) observe(now time.Time, from netip.AddrPort, id uint32) {
	w, ok := h.ports[from]
	if !ok {
		if len(h.ports) >= maxHolePort {
			h.sweep(now)
			if len(h.ports) >= maxHolePort {
				return // untracked; the table is full of live clients
			}
		}
		h.ports[from] = &portWindow{base: id, seen: 1, last: now}
		return
	}
	w.last = now
	d := int64(int32(id - w.base))
	switch {
	case d < 0:
		return // older than the window: late or duplicate
	case d < holeWindow:
		w.seen |= 1 << d
		return
	case d > maxHoleGap:
		w.base, w.seen = id, 1
		return
	}
	shift := d - (holeWindow - 1)
	var lost int64
	if shift >= holeWindow {
		lost = holeWindow - int64(bits.OnesCount64(w.seen)) + (shift - holeWindow)
		w.seen = 0
	} else {
		mask := uint64(1)<<shift - 1
		lost = shift - int64(bits.OnesCount64(w.seen&mask))
		w.seen >>= shift
	}
	w.base += uint32(shift)
	w.seen |= 1 << (holeWindow - 1)
	if lost > 0 {
		h.st.holesFromNewMessage.Add(uint64(lost))
	}
}

// sweep forgets clients idle for longer than the idle time, counting the ids
// they skipped below the highest one they sent. It runs at most once a second.
func (h *holes) sweep(now time.Time) {
	if now.Sub(h.swept) < time.Second {
		return
	}
	h.swept = now
	for k, w := range h.ports {
		if now.Sub(w.last) <= h.idle {
			continue
		}
		if w.seen != 0 {
			top := bits.Len64(w.seen) // slots up to the highest seen id
			lost := top - bits.OnesCount64(w.seen)
			if lost > 0 {
				h.st.holesFromDeadPort.Add(uint64(lost))
			}
		}
		delete(h.ports, k)
	}
}
