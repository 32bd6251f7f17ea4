// Package broker is the collector's AMQP 0-9-1 input: the consumer that
// carries the bus half of the delivery guarantee (a delivery is acknowledged
// only after its events are durably in the outbox), and the --dump tool.
//
// It sits under runtime/ beside the pipeline it feeds: it turns deliveries
// into pipeline.Message values and commits what the pipeline returns. It
// reads no configuration (cmd/ fills Options). The two small interfaces it
// needs, input.Processor (*pipeline.Pipeline) and input.Outbox
// (*outbox.Outbox), are declared once for the three inputs, in runtime/input.
//
// # Session
//
// Run loops over sessions forever, with capped exponential backoff and full
// jitter between them (a wait uniform in [0, step], the step doubling from
// Options.ReconnectMin to ReconnectMax; internal/backoff), until its context
// ends.
// One session is one connection:
//
//  1. Dial the endpoints of TRANSPORT_URL in order (oslo's rabbit:// form may
//     list several). Passwords appear in no log: URLs are logged with the
//     password replaced. With TLS (amqps://, or ?ssl=1) the broker's
//     certificate is always verified, against Options.TLS's CA file when
//     set (else the system's trust store), for TLS.ServerName when set (else
//     the URL's host), and the client certificate is presented when the
//     broker asks. The files are read at every dial (internal/tlsfiles), so
//     the consumer, the control link and the dump take rotated files at
//     their next connection; a refused handshake is explained (unknown CA,
//     expired, wrong name, client certificate wanted).
//  2. With QueueType quorum, read the broker version from the connection's
//     server properties and end the session before declaring anything when it
//     is older than 4.0 (ErrQuorumUnsupported; the message names
//     QUEUE_TYPE=classic). Before 4.0 x-delivery-limit -1 is itself a limit.
//  3. Declare the queue: durable; quorum with x-delivery-limit -1, or classic
//     with no queue type at all. A queue that exists with the other type is
//     refused by the broker; that is reported (ErrQueueTypeMismatch), nothing
//     is deleted, and the next session tries again.
//  4. Probe every listed exchange with a passive declare, each on a throwaway
//     channel (a 404 closes the channel it is made on). No exchange is ever
//     created. None present: the session fails (ErrNoExchanges). Some missing:
//     they are logged, counted in tally_collector_missing_exchanges, and
//     probed again after ProbeMin doubling to ProbeMax (1 s to 60 s); an
//     exchange that appears is bound at once. With RequireExchanges nothing is
//     bound or consumed until every listed exchange exists.
//  5. Bind <topic>.<priority> for each topic and each oslo priority (audit,
//     debug, info, warn, error, critical, sample), one binding at a time on a
//     channel of its own, never a wildcard: the service exchanges also carry
//     RPC with tokens. A binding the broker refuses (a topic permission) is
//     logged and counted; the channel is reopened and the others stay.
//  6. Consume with basic.qos Prefetch, watching connection close, channel
//     close and connection.blocked.
//
// # Map concurrently, commit in order, then ack
//
// Options.Workers mapping goroutines (default GOMAXPROCS; the Processor is
// safe for concurrent use) receive the deliveries themselves, from the
// channel amqp091-go fills. Each worker holds what it took (appends it, under
// the flow's lock, to a FIFO of held deliveries kept in delivery-tag order),
// maps it and marks it mapped. The session goroutine owns the AMQP channel:
// it does not touch a delivery on its way in, and only cuts commit groups and
// acknowledges them. Workers finish out of order; the FIFO does not move
// until its head is mapped. A delivery tag is one more than the channel's
// previous one, so the head of the FIFO moves only through a run of
// consecutive tags starting at the lowest tag not yet cut or requeued: a
// delivery a worker has taken but not yet held is a gap, and nothing behind it
// is cut, so no acknowledgement goes past it. The worker that maps the last
// delivery of a run of BatchMax, or the last one held, wakes the session
// (unless every commit slot is taken, or a short group's linger timer is
// armed): the session wakes a few times per commit group, not per delivery.
// (RabbitMQ numbers a channel's deliveries 1, 2, 3 and so on; a gap that
// never filled would hold the FIFO, never acknowledge past it, until the
// broker's consumer_timeout closed the channel and a new session began.)
//
// A delivery the broker marks as delivered before (the redelivered flag, or
// x-delivery-count above 0 on a quorum queue) is handed to the pipeline as
// no first delivery (pipeline.Message.FirstDelivery), and a built-in module
// maps it guarded: it may be the one a process died on (docs/abi.md, "When a
// built-in module runs away").
//
// One committer goroutine hands batches to the outbox, in order. Whenever
// fewer than CommitPipeline batches (default 2) are committing and the head
// of the FIFO is mapped, the session cuts the longest mapped run from the
// head (at most BatchMax deliveries, default Prefetch/2) and hands it over
// (group commit). With the outbox's pipelined append (input.PipelinedOutbox) the
// committer sequences a batch and hands it to the store while the batch
// before it syncs; a settler goroutine waits for each batch's durability in
// the same order and reports it to the session, which acknowledges each
// batch as it becomes durable. With CommitPipeline 1, or an Outbox without
// the pipelined append, each batch is written before the next. A run shorter than BatchMax waits while
// deliveries keep arriving and the prefetch window has room: up to
// CommitLinger (2 ms) after the last one, at most 4 × CommitLinger after
// the oldest one held, never while stopping; fewer, larger commits cost
// fewer syncs and acknowledgements. The batch's events go to the
// outbox in one synced append, its dead letters (notifications whose mapper
// failed) in one AppendDeadLetters, and when both are durable the session
// acknowledges the batch with one basic.ack multiple=true for its highest
// delivery tag. Meanwhile the deliveries behind it are being received and
// mapped, so at the default prefetch of 100 about two commits' worth of
// deliveries are in flight: one being committed, one being mapped. Each
// part carries the counts of its deliveries for the completeness ledger
// (package ledger): consumed with the outcome, in the same transaction. A
// run of skipped deliveries (versioned, unclaimed, event over 64 KiB) has
// only its counts to write: one small synced transaction, then the
// acknowledgement.
//
// Invariants:
//   - nothing is acknowledged before its commit is durable: batches are
//     cut from the head of the FIFO, handed to the outbox in that order,
//     and settle in that order (the outbox reports an append durable only
//     after every append before it), so when a batch is acknowledged up to
//     its highest tag, every delivery with a lower tag is in that batch or
//     in an earlier one that was durable and acknowledged, or was requeued;
//   - a failed batch requeues everything held, the batches committing
//     behind it included (the outbox fails them too, even if they reached
//     the disk, and withdraws them); their results, when they come, are
//     dropped, and no batch is handed over until they have come;
//   - events reach the outbox in delivery order;
//   - a multiple ack or nack never covers a delivery that is not settled
//     by it: acknowledgements go up to the last tag of a run of
//     consecutive held tags; a multiple nack goes up to the highest tag
//     held, and a delivery below it that a worker held only afterwards is
//     dropped (the nack returned it);
//   - every delivery tag held belongs to the session's one consuming
//     channel, and only the session goroutine acknowledges, rejects or
//     cancels on it. Workers and committer end with the session (a commit in
//     flight is awaited first); after a reconnect nothing of the old channel
//     is acknowledged, the broker redelivers it, and the outbox receives a
//     duplicate with the same event_id (the Reporting API counts duplicates);
//   - a delivery is held for at most its mapping, the commit before it and
//     its own (each bounded by CommitTimeout), far below RabbitMQ's
//     consumer_timeout (30 min).
//
// # Graceful stop
//
// When Run's context ends the session first cancels its consumer
// (basic.cancel), so the broker sends nothing more; the workers take what the
// client library had already received, until it closes the channel. The
// session then finishes what it holds, in
// order: the commit in flight is awaited and acknowledged, the rest is
// mapped, committed and acknowledged. What cannot be finished within 10 s is
// requeued. Only then does the connection close.
//
// # Back-pressure
//
// Append answering outbox.ErrFull (the BUFFER_MAX_EVENTS bound): the workers
// are sent off the channel (the session waits until none is between taking a
// delivery and holding it), the consumer is cancelled, every delivery held (the failed batch, the deliveries behind
// it, mapped or not, and what the client library had buffered) is returned
// with one basic.nack multiple=true requeue=true, and consumption resumes
// after PauseMin, doubling to PauseMax while the bound persists. Nothing
// stays unacknowledged during a pause. Any other Append error
// (outbox.ErrRefused: a full disk, an I/O error) sends the workers off the
// channel, requeues everything held the same way and takes no delivery for
// RefusedRetry (1 s), so the broker sees
// at most one nack per second. Mappings still running when their delivery is
// requeued finish and are dropped. On RabbitMQ 4 every return counts as a
// delivery of a quorum queue's message, a nack as much as a channel or
// connection that closed while holding it (x-delivery-count rises by one
// each time): that is why the queue is declared with x-delivery-limit -1,
// which keeps a message however often it comes back, where RabbitMQ 4's
// default limit of 20 would drop it (cmd/tally-openstack-collector/e2e's
// TestClusterRedeliveredPastTwenty).
//
// # Readiness, backlog and metrics
//
// Ready is nil only while a session is consuming (a pause at the bound
// included: that is back-pressure, not a fault). Backlogged is true while
// the consumer drains a backlog: within the last 500 ms a worker took a
// delivery whose tag was Prefetch past the last one settled (acknowledged
// or requeued), so the broker keeps the prefetch window full. The window is
// judged by tags, since what amqp091-go has buffered is not held: when
// mapping is slower than the commits, the rest of the window waits in that
// buffer and a backlog may read false. It is false while nothing is
// consumed, during a pause at the bound, and once the queue is drained. cmd/ hands the consumer to the
// sender, which holds back meanwhile. Metrics, registered on
// Options.Registerer when it is not nil: tally_collector_consumed_total,
// tally_collector_acked_total, tally_collector_nacked_total,
// tally_collector_reconnects_total, tally_collector_missing_exchanges,
// tally_collector_refused_bindings, tally_collector_broker_blocked,
// tally_collector_consumer_paused, tally_collector_commit_duration_seconds.
// The pipeline counts mapped, skipped, unparseable and failed notifications.
//
// # Tap
//
// With Options.Tap set, the session asks it once per batch, as the batch is
// cut, whether anyone listens (an atomic load on the channel's hub); only
// then does the batch keep, per delivery, its exchange, routing key, event
// type, body and events, and only after the batch is committed and
// acknowledged are they handed over, on the session goroutine, to a call
// that must not block (the hub drops what it cannot take). Nobody listening
// costs one interface call per batch.
//
// # Dump
//
// Dump shows what a deployment publishes: a server-named, exclusive,
// auto-delete queue bound with the same keys, automatic acknowledgement, one
// JSON line per delivery (see DumpLine). Every member named like a
// credential by internal/redact (password, token, secret, connection_info,
// *_key, cookie and the like), in any case and at any depth (the envelope's
// inner message, the _context_* members and JSON held in strings included),
// has its value replaced by "[redacted]". A body that looks like JSON but does
// not parse is printed redacted and cut to 512 bytes under "unparseable";
// a body that is not JSON (msgpack, zlib or gzip data) is reported by size.
//
// # Control link
//
// Control carries the mapper decisions (promote, abort) between the replicas
// of one deployment, each of which consumes the same queue with an outbox of
// its own. It knows nothing of mappers: cmd hands it the catalogue's
// decisions (Publish) and gives what it receives to the catalogue (Apply).
// One connection of its own per replica:
//
//  1. Declare the durable fanout exchange ControlOptions.Exchange
//     (tally-collector-control) and the durable queue
//     <exchange>.<replica> (quorum with x-delivery-limit -1, or classic, as
//     the notification queue), and bind it. The queue outlives the
//     replica, so a replica that is down finds the decisions taken meanwhile
//     when it comes back.
//  2. Consume it exclusively, prefetch 1: a second collector with the same
//     replica name is refused (ErrReplicaNameTaken) and retries.
//  3. Publish, in order, the decisions not confirmed yet: persistent, on a
//     channel in confirm mode, one at a time.
//  4. Deliver each message to Apply, in order; acknowledge it once Apply
//     returned nil, or hold it and call Apply again after ApplyRetry. A
//     body that cannot be read is logged, counted and acknowledged.
//
// Publish keeps a decision in ControlOptions.Store (the outbox) before
// sending it and forgets it once the broker confirmed it, so a decision the
// broker did not take yet is sent again by the next session, or the next run.
// It waits for the confirm at most ConfirmTimeout and answers at once when
// the link is down; either way the error wraps ErrNotShared and the
// decision stays kept. At most 100 wait (maxUnsent). A replica receives its own
// decisions too; Apply ignores them (the catalogue knows its replica name).
// Metrics: tally_collector_control_link_up, tally_collector_control_unsent_decisions,
// tally_collector_control_published_total, tally_collector_control_unreadable_total.
//
// # Concurrency
//
// New and Dump may be called from any goroutine. Run may be called once per
// Consumer; Ready and Backlogged are safe for concurrent use with it. While
// a connection lasts, one goroutine alone acknowledges, rejects and cancels
// on its AMQP channel; the workers receive from its delivery channel, which
// the session publishes to them (an atomic pointer, with a channel closed to
// send them off it). The FIFO and its counts are shared under one mutex:
// workers hold deliveries and set an item's done flag after writing its
// result, the session cuts and settles. The committer and the settler
// receive and answer batches over channels.
package broker
