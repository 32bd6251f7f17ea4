package plog

import (
	"sort"
	"sync"
	"sync/atomic"
	"time"
)

// stats are one listener's counters. Every field is updated atomically, so the
// reader, the workers, the committer and a scrape may touch them at once.
type stats struct {
	// The seed's STAT keys.
	failedToSend       atomic.Uint64
	exceptions         atomic.Uint64
	udpSimpleMessages  atomic.Uint64
	udpInvalidVersion  atomic.Uint64
	v0InvalidType      atomic.Uint64
	unknownCommand     atomic.Uint64
	v0Commands         atomic.Uint64
	v0InvalidHeader    atomic.Uint64
	v0Fragments        [indexBuckets]atomic.Uint64
	v0InvalidFragments [sizeBuckets][indexBuckets]atomic.Uint64
	v0InvalidChecksum  [indexBuckets]atomic.Uint64
	droppedFragments   [sizeBuckets][indexBuckets]atomic.Uint64
	cacheEvictions     atomic.Uint64
	cacheHits          atomic.Uint64
	cacheMisses        atomic.Uint64

	// Counters the seed does not list.
	v0RefusedCommands   atomic.Uint64
	v0Untrusted         atomic.Uint64
	v0RateLimited       atomic.Uint64
	tcpRefusedPerSource atomic.Uint64
	v0DuplicateFrags    atomic.Uint64
	holesFromNewMessage atomic.Uint64
	holesFromDeadPort   atomic.Uint64
	udpEmpty            atomic.Uint64
	socketDrops         atomic.Uint64 // cumulative, as the kernel reports it (SO_RXQ_OVFL)
	outboxFull          atomic.Uint64
	mapped              atomic.Uint64
	skipped             atomic.Uint64
	unparseable         atomic.Uint64
	failed              atomic.Uint64
	unknownRoute        atomic.Uint64
	nullRoute           atomic.Uint64
	eventsCommitted     atomic.Uint64
	tcpConnections      atomic.Int64
	tcpRefused          atomic.Uint64
	tcpLines            atomic.Uint64
	tcpReservedLines    atomic.Uint64
	tcpOverlongLines    atomic.Uint64
	tcpTimeouts         atomic.Uint64
	defragBytes         heldBytes
	tcpLineBytes        heldBytes
	tcpLineBudgetClosed atomic.Uint64
	defragMessages      atomic.Int64

	// started is when the listener was made; STAT's uptime counts from it.
	started time.Time
	// modules counts, per module id, the messages each module mapped or
	// failed on: STAT's handlers. A module id comes from the listener's chain
	// or the catalogue, both fixed sets, so the map is bounded.
	modules sync.Map // string -> *moduleStats
}

// moduleStats are one module's counts in a listener.
type moduleStats struct{ mapped, failed, events atomic.Uint64 }

// module is the counts of module id, made on first use.
func (s *stats) module(id string) *moduleStats {
	if m, ok := s.modules.Load(id); ok {
		return m.(*moduleStats)
	}
	m, _ := s.modules.LoadOrStore(id, &moduleStats{})
	return m.(*moduleStats)
}

// heldBytes is a gauge of bytes held in buffers, with its high-water mark.
// The peak is not exported; the tests read it to check a memory bound by what
// the package accounts rather than by sampling the gauge.
type heldBytes struct{ cur, peak atomic.Int64 }

func (h *heldBytes) add(delta int64) {
	n := h.cur.Add(delta)
	for p := h.peak.Load(); n > p && !h.peak.CompareAndSwap(p, n); p = h.peak.Load() {
	}
}

// Rate is the shape the seed gives each kafka statistic: a count and the 1, 5
// and 15 minute rates. There is no Kafka here; every value is zero.
type Rate struct {
	Count int64      `json:"count"`
	Rate  [3]float64 `json:"rate"`
}

// Cache is the defragmenter section of Snapshot.
type Cache struct {
	Evictions uint64 `json:"evictions"`
	Hits      uint64 `json:"hits"`
	Misses    uint64 `json:"misses"`
}

// Handler is one entry of STAT's handlers section, which the original fills
// with each of its handlers' statistics and name. Here a handler is a mapping
// module: Name is its id (name@version, or "canonical" for canonical events
// passed through), with the messages it mapped, the events they gave and the
// messages it failed on (dead-lettered).
type Handler struct {
	Name   string `json:"name"`
	Mapped uint64 `json:"mapped"`
	Events uint64 `json:"events"`
	Failed uint64 `json:"failed"`
}

// Snapshot is a copy of one listener's counters. Its JSON form is the answer to
// the STAT command: every key the seed lists, with the same names, followed by
// the keys this implementation adds (docs/plog.md describes each).
type Snapshot struct {
	Version                  string                            `json:"version"`
	FailedToSend             uint64                            `json:"failed_to_send"`
	Exceptions               uint64                            `json:"exceptions"`
	UDPSimpleMessages        uint64                            `json:"udp_simple_messages"`
	UDPInvalidVersion        uint64                            `json:"udp_invalid_version"`
	V0InvalidType            uint64                            `json:"v0_invalid_type"`
	UnknownCommand           uint64                            `json:"unknown_command"`
	V0Commands               uint64                            `json:"v0_commands"`
	V0InvalidMultipartHeader uint64                            `json:"v0_invalid_multipart_header"`
	V0Fragments              [indexBuckets]uint64              `json:"v0_fragments"`
	V0InvalidFragments       [sizeBuckets][indexBuckets]uint64 `json:"v0_invalid_fragments"`
	V0InvalidChecksum        [indexBuckets]uint64              `json:"v0_invalid_checksum"`
	DroppedFragments         [sizeBuckets][indexBuckets]uint64 `json:"dropped_fragments"`
	Cache                    Cache                             `json:"cache"`
	Kafka                    map[string]Rate                   `json:"kafka"`

	// Keys the original has written since 2014 beside the ones its README
	// lists; its Datadog check reads uptime and unhandled_objects.
	Uptime           int64     `json:"uptime"` // milliseconds since the listener started
	UnhandledObjects uint64    `json:"unhandled_objects"`
	Defragmenter     Cache     `json:"defragmenter"` // the same counts as cache, under the newer name
	Handlers         []Handler `json:"handlers"`

	// Failures gathers, under their own names, every counter of something
	// lost or refused (the bucketed ones summed), so that a reader can sum
	// them into one figure: the proposal "collect all failure counts into a
	// single object" of plog's tracker. docs/plog.md lists what is in it.
	Failures map[string]uint64 `json:"failures"`

	V0RefusedCommands     uint64 `json:"v0_refused_commands"`
	V0UntrustedCommands   uint64 `json:"v0_untrusted_commands"`
	V0RateLimitedCommands uint64 `json:"v0_rate_limited_commands"`
	TCPRefusedPerSource   uint64 `json:"tcp_refused_per_source"`
	V0DuplicateFrags      uint64 `json:"v0_duplicate_fragments"`
	HolesFromNewMessage   uint64 `json:"holes_from_new_message"`
	HolesFromDeadPort     uint64 `json:"holes_from_dead_port"`
	UDPEmpty              uint64 `json:"udp_empty_messages"`
	SocketDrops           uint64 `json:"socket_drops"`
	OutboxFull            uint64 `json:"outbox_full"`
	Mapped                uint64 `json:"mapped"`
	Skipped               uint64 `json:"skipped"`
	Unparseable           uint64 `json:"unparseable"`
	Failed                uint64 `json:"failed"`
	UnknownRoute          uint64 `json:"unknown_route"`
	NullRoute             uint64 `json:"null_route"`
	EventsCommitted       uint64 `json:"events_committed"`
	TCPConnections        int64  `json:"tcp_connections"`
	TCPRefused            uint64 `json:"tcp_refused_connections"`
	TCPLines              uint64 `json:"tcp_lines"`
	TCPReservedLines      uint64 `json:"tcp_reserved_lines"`
	TCPOverlongLines      uint64 `json:"tcp_overlong_lines"`
	TCPTimeouts           uint64 `json:"tcp_timeouts"`
	DefragBytes           int64  `json:"defrag_bytes"`
	DefragMessages        int64  `json:"defrag_messages"`
	TCPLineBytes          int64  `json:"tcp_line_bytes"`
	TCPLineBudgetClosed   uint64 `json:"tcp_line_budget_closed"`
}

// kafkaKeys are the seed's kafka statistics, kept by name and reported as zero.
var kafkaKeys = [...]string{"byteRate", "messageRate", "failedSendRate", "resendRate", "droppedMessageRate", "serializationErrorRate"}

func (s *stats) snapshot(version string) Snapshot {
	out := Snapshot{
		Version:                  version,
		FailedToSend:             s.failedToSend.Load(),
		Exceptions:               s.exceptions.Load(),
		UDPSimpleMessages:        s.udpSimpleMessages.Load(),
		UDPInvalidVersion:        s.udpInvalidVersion.Load(),
		V0InvalidType:            s.v0InvalidType.Load(),
		UnknownCommand:           s.unknownCommand.Load(),
		V0Commands:               s.v0Commands.Load(),
		V0InvalidMultipartHeader: s.v0InvalidHeader.Load(),
		Cache: Cache{
			Evictions: s.cacheEvictions.Load(),
			Hits:      s.cacheHits.Load(),
			Misses:    s.cacheMisses.Load(),
		},
		Kafka: make(map[string]Rate, len(kafkaKeys)),

		V0RefusedCommands:     s.v0RefusedCommands.Load(),
		V0UntrustedCommands:   s.v0Untrusted.Load(),
		V0RateLimitedCommands: s.v0RateLimited.Load(),
		TCPRefusedPerSource:   s.tcpRefusedPerSource.Load(),
		V0DuplicateFrags:      s.v0DuplicateFrags.Load(),
		HolesFromNewMessage:   s.holesFromNewMessage.Load(),
		HolesFromDeadPort:     s.holesFromDeadPort.Load(),
		UDPEmpty:              s.udpEmpty.Load(),
		SocketDrops:           s.socketDrops.Load(),
		OutboxFull:            s.outboxFull.Load(),
		Mapped:                s.mapped.Load(),
		Skipped:               s.skipped.Load(),
		Unparseable:           s.unparseable.Load(),
		Failed:                s.failed.Load(),
		UnknownRoute:          s.unknownRoute.Load(),
		NullRoute:             s.nullRoute.Load(),
		EventsCommitted:       s.eventsCommitted.Load(),
		TCPConnections:        s.tcpConnections.Load(),
		TCPRefused:            s.tcpRefused.Load(),
		TCPLines:              s.tcpLines.Load(),
		TCPReservedLines:      s.tcpReservedLines.Load(),
		TCPOverlongLines:      s.tcpOverlongLines.Load(),
		TCPTimeouts:           s.tcpTimeouts.Load(),
		DefragBytes:           s.defragBytes.cur.Load(),
		DefragMessages:        s.defragMessages.Load(),
		TCPLineBytes:          s.tcpLineBytes.cur.Load(),
		TCPLineBudgetClosed:   s.tcpLineBudgetClosed.Load(),
	}
	for _, k := range kafkaKeys {
		out.Kafka[k] = Rate{}
	}
	for i := range s.v0Fragments {
		out.V0Fragments[i] = s.v0Fragments[i].Load()
		out.V0InvalidChecksum[i] = s.v0InvalidChecksum[i].Load()
	}
	for i := range s.v0InvalidFragments {
		for j := range s.v0InvalidFragments[i] {
			out.V0InvalidFragments[i][j] = s.v0InvalidFragments[i][j].Load()
			out.DroppedFragments[i][j] = s.droppedFragments[i][j].Load()
		}
	}
	if !s.started.IsZero() {
		out.Uptime = time.Since(s.started).Milliseconds()
	}
	out.Defragmenter = out.Cache
	sum := func(a []uint64) (n uint64) {
		for _, v := range a {
			n += v
		}
		return n
	}
	var invalidFrags, droppedFrags uint64
	for i := range out.V0InvalidFragments {
		invalidFrags += sum(out.V0InvalidFragments[i][:])
		droppedFrags += sum(out.DroppedFragments[i][:])
	}
	out.Failures = map[string]uint64{
		"failed_to_send":              out.FailedToSend,
		"exceptions":                  out.Exceptions,
		"udp_invalid_version":         out.UDPInvalidVersion,
		"v0_invalid_type":             out.V0InvalidType,
		"v0_invalid_multipart_header": out.V0InvalidMultipartHeader,
		"v0_invalid_fragments":        invalidFrags,
		"v0_invalid_checksum":         sum(out.V0InvalidChecksum[:]),
		"dropped_fragments":           droppedFrags,
		"socket_drops":                out.SocketDrops,
		"holes_from_new_message":      out.HolesFromNewMessage,
		"holes_from_dead_port":        out.HolesFromDeadPort,
		"unparseable":                 out.Unparseable,
		"failed":                      out.Failed,
		"unknown_route":               out.UnknownRoute,
		"tcp_refused_connections":     out.TCPRefused,
		"tcp_refused_per_source":      out.TCPRefusedPerSource,
		"tcp_reserved_lines":          out.TCPReservedLines,
		"tcp_overlong_lines":          out.TCPOverlongLines,
		"tcp_timeouts":                out.TCPTimeouts,
		"tcp_line_budget_closed":      out.TCPLineBudgetClosed,
	}
	out.Handlers = []Handler{}
	s.modules.Range(func(k, v any) bool {
		m := v.(*moduleStats)
		out.Handlers = append(out.Handlers, Handler{Name: k.(string), Mapped: m.mapped.Load(), Events: m.events.Load(), Failed: m.failed.Load()})
		return true
	})
	sort.Slice(out.Handlers, func(i, j int) bool { return out.Handlers[i].Name < out.Handlers[j].Name })
	return out
}
