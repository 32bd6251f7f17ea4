package plog

import (
	"strconv"

	"github.com/prometheus/client_golang/prometheus"
)

// collector exports every listener's counters at scrape time; the counters
// themselves are the atomics STAT reads, so /metrics and STAT always agree.
type collector struct{ srv *Server }

var _ prometheus.Collector = (*collector)(nil)

type counterDesc struct {
	desc *prometheus.Desc
	get  func(*stats) uint64
}

func newDesc(name, help string, labels ...string) *prometheus.Desc {
	return prometheus.NewDesc("tally_collector_plog_"+name, help, append([]string{"listener"}, labels...), nil)
}

var (
	plainCounters = []counterDesc{
		{newDesc("failed_to_send_total", "Messages whose events could not be committed to the outbox (STAT failed_to_send)."), func(s *stats) uint64 { return s.failedToSend.Load() }},
		{newDesc("exceptions_total", "Unexpected errors: panics, read, accept and outbox I/O errors (STAT exceptions)."), func(s *stats) uint64 { return s.exceptions.Load() }},
		{newDesc("udp_simple_messages_total", "Unboxed UDP messages received (STAT udp_simple_messages)."), func(s *stats) uint64 { return s.udpSimpleMessages.Load() }},
		{newDesc("udp_invalid_version_total", "UDP datagrams with a version byte between 1 and 31 (STAT udp_invalid_version)."), func(s *stats) uint64 { return s.udpInvalidVersion.Load() }},
		{newDesc("v0_invalid_type_total", "Version 0 datagrams with an unknown packet type (STAT v0_invalid_type)."), func(s *stats) uint64 { return s.v0InvalidType.Load() }},
		{newDesc("unknown_command_total", "Unknown commands (STAT unknown_command)."), func(s *stats) uint64 { return s.unknownCommand.Load() }},
		{newDesc("v0_commands_total", "Known commands received, refused ones included (STAT v0_commands)."), func(s *stats) uint64 { return s.v0Commands.Load() }},
		{newDesc("v0_invalid_multipart_header_total", "Fragments whose header could not be accepted (STAT v0_invalid_multipart_header)."), func(s *stats) uint64 { return s.v0InvalidHeader.Load() }},
		{newDesc("cache_evictions_total", "Incomplete messages evicted from the defragmenter (STAT cache.evictions)."), func(s *stats) uint64 { return s.cacheEvictions.Load() }},
		{newDesc("cache_hits_total", "Fragments of a message the defragmenter knew (STAT cache.hits)."), func(s *stats) uint64 { return s.cacheHits.Load() }},
		{newDesc("cache_misses_total", "Fragments of a message the defragmenter did not know yet (STAT cache.misses)."), func(s *stats) uint64 { return s.cacheMisses.Load() }},
		{newDesc("v0_refused_commands_total", "ENVI and KILL commands refused where not enabled (STAT v0_refused_commands)."), func(s *stats) uint64 { return s.v0RefusedCommands.Load() }},
		{newDesc("v0_untrusted_commands_total", "STAT, ENVI and KILL commands from a source outside the trusted set (loopback), not answered (STAT v0_untrusted_commands)."), func(s *stats) uint64 { return s.v0Untrusted.Load() }},
		{newDesc("v0_rate_limited_commands_total", "Command packets dropped for the per-source rate limit (STAT v0_rate_limited_commands)."), func(s *stats) uint64 { return s.v0RateLimited.Load() }},
		{newDesc("v0_duplicate_fragments_total", "Fragments received twice (STAT v0_duplicate_fragments)."), func(s *stats) uint64 { return s.v0DuplicateFrags.Load() }},
		{newDesc("holes_from_new_message_total", "Message ids a client skipped, seen when a newer id arrived (STAT holes_from_new_message)."), func(s *stats) uint64 { return s.holesFromNewMessage.Load() }},
		{newDesc("holes_from_dead_port_total", "Message ids a client skipped before going quiet (STAT holes_from_dead_port)."), func(s *stats) uint64 { return s.holesFromDeadPort.Load() }},
		{newDesc("udp_empty_messages_total", "Empty UDP datagrams (STAT udp_empty_messages)."), func(s *stats) uint64 { return s.udpEmpty.Load() }},
		{newDesc("socket_drops_total", "Datagrams the kernel dropped for a full socket receive buffer (SO_RXQ_OVFL; STAT socket_drops)."), func(s *stats) uint64 { return s.socketDrops.Load() }},
		{newDesc("outbox_full_total", "Messages that met a full outbox (STAT outbox_full)."), func(s *stats) uint64 { return s.outboxFull.Load() }},
		{newDesc("mapped_total", "Messages the pipeline mapped (STAT mapped)."), func(s *stats) uint64 { return s.mapped.Load() }},
		{newDesc("skipped_total", "Messages the pipeline skipped (STAT skipped)."), func(s *stats) uint64 { return s.skipped.Load() }},
		{newDesc("unparseable_total", "Messages the pipeline could not read (STAT unparseable)."), func(s *stats) uint64 { return s.unparseable.Load() }},
		{newDesc("failed_total", "Messages whose mapper failed; dead-lettered (STAT failed)."), func(s *stats) uint64 { return s.failed.Load() }},
		{newDesc("unknown_route_total", "Messages whose kt: tag names a module the listener lacks (STAT unknown_route)."), func(s *stats) uint64 { return s.unknownRoute.Load() }},
		{newDesc("null_route_total", "Messages tagged kt:null, dropped on purpose (STAT null_route)."), func(s *stats) uint64 { return s.nullRoute.Load() }},
		{newDesc("events_committed_total", "Events committed to the outbox (STAT events_committed)."), func(s *stats) uint64 { return s.eventsCommitted.Load() }},
		{newDesc("tcp_refused_connections_total", "TCP connections closed at once for the connection cap (STAT tcp_refused_connections)."), func(s *stats) uint64 { return s.tcpRefused.Load() }},
		{newDesc("tcp_refused_per_source_total", "TCP connections closed at once for the per-source cap (STAT tcp_refused_per_source)."), func(s *stats) uint64 { return s.tcpRefusedPerSource.Load() }},
		{newDesc("tcp_lines_total", "TCP lines received as messages (STAT tcp_lines)."), func(s *stats) uint64 { return s.tcpLines.Load() }},
		{newDesc("tcp_reserved_lines_total", "TCP lines starting with \\0 that are neither a command nor tags and a message, ignored (STAT tcp_reserved_lines)."), func(s *stats) uint64 { return s.tcpReservedLines.Load() }},
		{newDesc("tcp_overlong_lines_total", "TCP lines over the line limit, skipped (STAT tcp_overlong_lines)."), func(s *stats) uint64 { return s.tcpOverlongLines.Load() }},
		{newDesc("tcp_timeouts_total", "TCP connections closed for idleness (STAT tcp_timeouts)."), func(s *stats) uint64 { return s.tcpTimeouts.Load() }},
	}
	descFragments        = newDesc("v0_fragments_total", "Fragments received, valid or not, by log2 of their index (STAT v0_fragments).", "index_log2")
	descInvalidFragments = newDesc("v0_invalid_fragments_total", "Fragments inconsistent with their message, by log2(size-1) and log2(index) (STAT v0_invalid_fragments).", "size_log2", "index_log2")
	descInvalidChecksum  = newDesc("v0_invalid_checksum_total", "Messages whose MurmurHash3 did not match, by log2(fragment count-1) (STAT v0_invalid_checksum).", "count_log2")
	descDroppedFragments = newDesc("dropped_fragments_total", "Fragments never received before their message was evicted, by log2(size-1) and log2(index) (STAT dropped_fragments).", "size_log2", "index_log2")
	descDefragBytes      = newDesc("defrag_bytes", "Bytes held by the defragmenter.")
	descDefragMessages   = newDesc("defrag_messages", "Incomplete messages held by the defragmenter.")
	descTCPConnections   = newDesc("tcp_connections", "Open TCP connections.")
	descTCPLineBytes     = newDesc("tcp_line_bytes", "Bytes held by the partial lines of the TCP connections (STAT tcp_line_bytes).")
	descTCPClosed        = newDesc("tcp_closed_connections_total", "TCP connections the listener closed, by reason: idle_timeout (STAT tcp_timeouts), line_budget (STAT tcp_line_budget_closed).", "reason")
)

func (c *collector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range plainCounters {
		ch <- d.desc
	}
	for _, d := range []*prometheus.Desc{descFragments, descInvalidFragments, descInvalidChecksum,
		descDroppedFragments, descDefragBytes, descDefragMessages, descTCPConnections, descTCPLineBytes, descTCPClosed} {
		ch <- d
	}
}

// Collect emits every plain counter, and the bucketed ones only where non-zero.
func (c *collector) Collect(ch chan<- prometheus.Metric) {
	for _, l := range c.srv.listeners {
		s := &l.st
		for _, d := range plainCounters {
			ch <- prometheus.MustNewConstMetric(d.desc, prometheus.CounterValue, float64(d.get(s)), l.name)
		}
		for i := range s.v0Fragments {
			if v := s.v0Fragments[i].Load(); v > 0 {
				ch <- prometheus.MustNewConstMetric(descFragments, prometheus.CounterValue, float64(v), l.name, strconv.Itoa(i))
			}
			if v := s.v0InvalidChecksum[i].Load(); v > 0 {
				ch <- prometheus.MustNewConstMetric(descInvalidChecksum, prometheus.CounterValue, float64(v), l.name, strconv.Itoa(i))
			}
		}
		for i := range s.v0InvalidFragments {
			for j := range s.v0InvalidFragments[i] {
				if v := s.v0InvalidFragments[i][j].Load(); v > 0 {
					ch <- prometheus.MustNewConstMetric(descInvalidFragments, prometheus.CounterValue, float64(v), l.name, strconv.Itoa(i), strconv.Itoa(j))
				}
				if v := s.droppedFragments[i][j].Load(); v > 0 {
					ch <- prometheus.MustNewConstMetric(descDroppedFragments, prometheus.CounterValue, float64(v), l.name, strconv.Itoa(i), strconv.Itoa(j))
				}
			}
		}
		ch <- prometheus.MustNewConstMetric(descDefragBytes, prometheus.GaugeValue, float64(s.defragBytes.cur.Load()), l.name)
		ch <- prometheus.MustNewConstMetric(descDefragMessages, prometheus.GaugeValue, float64(s.defragMessages.Load()), l.name)
		ch <- prometheus.MustNewConstMetric(descTCPConnections, prometheus.GaugeValue, float64(s.tcpConnections.Load()), l.name)
		ch <- prometheus.MustNewConstMetric(descTCPLineBytes, prometheus.GaugeValue, float64(s.tcpLineBytes.cur.Load()), l.name)
		ch <- prometheus.MustNewConstMetric(descTCPClosed, prometheus.CounterValue, float64(s.tcpTimeouts.Load()), l.name, closedIdleTimeout)
		ch <- prometheus.MustNewConstMetric(descTCPClosed, prometheus.CounterValue, float64(s.tcpLineBudgetClosed.Load()), l.name, closedLineBudget)
	}
}
