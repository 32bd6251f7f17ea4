// Package broker is the collector's AMQP 0-9-1 input: the consumer that
// carries the bus half of the delivery guarantee (a delivery is acknowledged
// only after its events are durably in the outbox), and the --dump tool.
//
// It sits under runtime/ beside the pipeline it feeds: it turns deliveries
// into pipeline.Message values and commits what the pipeline returns. It
// reads no configuration (cmd/ fills Options), and it declares the two small
// interfaces it needs, Processor (*pipeline.Pipeline) and Outbox
// (*outbox.Outbox).
//
// # Session
//
// Run loops over sessions forever, with capped exponential backoff and jitter
// between them (Options.ReconnectMin..ReconnectMax), until its context ends.
// One session is one connection:
//
//  1. Dial the endpoints of TRANSPORT_URL in order (oslo's rabbit:// form may
//     list several; amqps verifies the server certificate). Passwords appear
//     in no log: URLs are logged with the password replaced.
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
// # Batching, commit, then ack
//
// One goroutine per session takes deliveries, maps each with the Processor at
// once, and gathers a batch of up to BatchMax deliveries (or what arrived
// within BatchLinger). The batch's events go to the outbox in one Append,
// the notifications whose mapper failed go to the dead-letter area in one
// AppendDeadLetters, and only then is the batch acknowledged with one
// basic.ack multiple=true for its highest delivery tag. Deliveries that yield
// nothing to commit (unparseable, body over 1 MiB, skipped, versioned,
// unclaimed, event over 64 KiB) ride in the same batch and are acknowledged
// with it, so a multiple ack never covers a delivery that was not committed.
//
// Invariants:
//   - nothing is acknowledged before its commit returned nil;
//   - every delivery tag held belongs to the session's one consuming channel,
//     and the batch dies with the session: after a reconnect nothing of the
//     old channel is acknowledged, the broker redelivers it, and the outbox
//     receives a duplicate with the same event_id (the Reporting API counts
//     duplicates);
//   - a delivery is held at most BatchLinger plus one commit (bounded by
//     CommitTimeout), far below RabbitMQ's consumer_timeout (30 min).
//
// # Back-pressure
//
// Append answering outbox.ErrFull (the BUFFER_MAX_EVENTS bound): the consumer
// is cancelled, every delivery held (the batch and what was in flight) is
// returned with one basic.nack requeue=true, and consumption resumes after
// PauseMin, doubling to PauseMax while the bound persists. Nothing stays
// unacknowledged during a pause. Any other Append error (outbox.ErrRefused: a
// full disk, an I/O error) requeues the batch and takes no delivery for
// RefusedRetry (1 s), so the broker sees at most one nack per second. A nack
// does not count against a quorum queue's delivery limit; a closed session
// would.
//
// # Readiness and metrics
//
// Ready is nil only while a session is consuming (a pause at the bound
// included: that is back-pressure, not a fault). Metrics, registered on
// Options.Registerer when it is not nil: tally_collector_consumed_total,
// tally_collector_acked_total, tally_collector_nacked_total,
// tally_collector_reconnects_total, tally_collector_missing_exchanges,
// tally_collector_refused_bindings, tally_collector_broker_blocked,
// tally_collector_consumer_paused, tally_collector_commit_duration_seconds.
// The pipeline counts mapped, skipped, unparseable and failed notifications.
//
// # Dump
//
// Dump shows what a deployment publishes: a server-named, exclusive,
// auto-delete queue bound with the same keys, automatic acknowledgement, one
// JSON line per delivery (see DumpLine). Every member whose name contains
// password, token, secret or connection_info, in any case and at any depth
// (the envelope's inner message and the _context_* members included), has
// its value replaced by "[redacted]". A body that looks like JSON but does
// not parse is printed redacted and cut to 512 bytes under "unparseable";
// a body that is not JSON (msgpack, zlib or gzip data) is reported by size.
//
// # Concurrency
//
// New and Dump may be called from any goroutine. Run may be called once per
// Consumer; Ready is safe for concurrent use with it.
package broker
