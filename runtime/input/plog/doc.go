// Package plog is the plog-compatible input: UDP and TCP listeners that speak
// airbnb plog's wire protocol, so an existing plog client, or one line of
// `printf ... | socat`, can hand usage events to the collector. docs/plog.md is
// the operator's description; this comment is the design.
//
// # Flow
//
// Each listener owns, in order:
//
//	reader ──queue──> workers ──commits──> committer ──> Outbox.Append
//
// The reader is one goroutine: for UDP it receives datagrams and runs the
// protocol (commands, header parsing, the defragmenter, hole detection); for TCP
// it accepts connections, one goroutine each, that split lines. A complete
// message goes on the queue, bounded by Settings.QueueBytes and 65 536 slots.
// Settings.Workers goroutines call the shared pipeline (Processor) with
// Message{Exchange: "plog", RoutingKey: the listener name or an rk: tag,
// Modules: the listener's chain or the modules its kt: tags select,
// Canonical: true, DeriveID: true}. Mapped events go to the committer, which
// writes them to the outbox in batches: BatchMax events, 512 KiB, or BatchLinger
// after the first, whichever comes first; a commit in flight lets the next batch
// grow (group commit). A mapper failure dead-letters the message body.
//
// # Loss and back-pressure
//
// UDP cannot push back. When the queue is full the reader stops reading, the
// kernel's receive buffer fills, and the kernel drops datagrams, which the
// kernel counts and the reader reports (SO_RXQ_OVFL, socket_drops). When the
// outbox refuses a batch (full or failing) a UDP listener drops it and counts
// the messages (failed_to_send, outbox_full). A TCP listener retries the batch
// with backoff instead: the committer stalls, the queues fill, the connection
// goroutines stop reading, and TCP flow control pushes back on the clients.
// Every other place a message can disappear is counted too; docs/plog.md lists
// them.
//
// # The defragmenter
//
// Entries are keyed by (client address and port, message id) and kept in a
// map plus a list in arrival order. Every header field is validated before
// anything is allocated (parseHeader, then the payload length against the
// header or against the entry's first fragment), and a message that could not
// fit under Settings.DefragMaxBytes is refused outright. Nothing is sized by
// what a header announces: an entry keeps its fragments' payloads in arrival
// order in a buffer that grows with them (doubling, capped at the length), with
// their indices beside them, and assembles the message when the last arrives.
// It is charged the capacity of those buffers, its bitmap (made once 256
// fragments arrived, for counts over 512), its tags and a fixed overhead; the
// defragmenter's total never passes the bound. To make room, and once an entry
// is older than Settings.DefragMaxAge, the oldest entries are evicted and each
// fragment they still lacked is counted in dropped_fragments. The keys of
// the last 4 096 completed messages are remembered so a late duplicate is
// counted, not mistaken for a new message. The reader runs housekeeping (age
// eviction, the hole detector's sweep) at least once a second, waking itself
// with a read deadline when the socket is quiet.
//
// # The TCP line budget
//
// A connection reads through a 64 KiB buffer and hands a line that fits in it
// on from there; a longer line is gathered in a line buffer that grows by
// doubling up to MaxLineBytes+1. The line buffers of a listener share
// Settings.LineBudgetBytes (lineBudget): each connection may hold
// budget / (2 × MaxConnections) bytes unconditionally, and growth past that
// share is borrowed, with a compare-and-swap, from the rest of the budget and
// returned when the line ends or the connection closes. A connection that
// cannot borrow is closed and counted (tcp_line_budget_closed). Since at most
// MaxConnections connections are open, the buffers never hold more than the
// budget, and a connection within its share never depends on the others.
//
// # Concurrency
//
// The defragmenter and the hole detector belong to the UDP reader goroutine and
// have no locks. Counters are atomics, read by STAT, Server.Stats and the
// Prometheus collector at any time. The pipeline is called from several workers
// at once; it is safe for concurrent use. Server.Run may be called once;
// Server.Close may be called from any goroutine, any number of times. Order is
// not kept across workers: two messages may be committed in either order.
//
// # Stopping
//
// When Run's context is done (or Close is called) the sockets are closed, the
// readers return, the workers finish the queue and the committer writes the
// last batch, all bounded by Options.DrainTimeout. Incomplete messages in the
// defragmenter are evicted and counted. A permitted KILL command calls
// Options.Stop; it never exits the process.
package plog
