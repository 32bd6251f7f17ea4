// Package channel is the daemon's end of the local message channel: an input
// on a Unix socket through which programs on the same host (a bare-metal
// provisioner, a license meter, a batch scheduler) hand the collector usage
// messages, and through which operators tap the events the collector
// produces. docs/channel.md is the operator's and the client writer's
// description (with the frame layout); package wire is the codec, package
// client the Go client. This comment is the design.
//
// # Flow
//
//	connection reader ──work──> workers ──commits──> committer ──> Outbox.Append
//	      ▲                                              │
//	      └──────── budget (QueueBytes) ◄────────────────┤ answers (Ack) ──> connection writer
//	                                                     └ Hub.Offer ──> hub ──> subscribers' writers
//
// Each connection has a reader goroutine (serve) and a writer goroutine
// (writeLoop). The reader checks each PUBLISH (type, tag, size, JSON
// validity, credentials against SO_PEERCRED) and either answers it Refused
// at once or wraps it in an envelope
//
//	{"event_type":<tag>,"channel":{"type":..,"published_at":..,"uid":..,"gid":..},"message":<data>}
//
// and hands it to Options.Workers goroutines that call the shared pipeline
// with Message{Exchange: "channel", RoutingKey: tag, DeriveID: true}: the
// tag is the event type the catalogue routes on, so a module claims tags
// with the same globs it claims event types with (the built-in channel
// module claims usage and usage.*). One committer writes the results to the
// outbox in batches (BatchMax, 512 KiB, or BatchLinger after the first;
// group commit), dead letters in the same step, and only once Append and
// AppendDeadLetters returned nil does it answer each message: Committed,
// DeadLettered, or Skipped (nothing to commit). The answer is the client's
// acknowledgement; the same guarantee as the AMQP input.
//
// # Back-pressure and loss
//
// The bytes received and not yet answered are bounded across connections by
// Options.QueueBytes (the budget): while it is spent the readers do not
// read, the sockets fill, and the clients' bounded queues answer ErrNoBufs.
// A batch the outbox refuses (full, failing) is held and tried again,
// RetryMin doubling to RetryMax, so the same chain pushes back. One
// connection may have at most 65 536 messages unanswered. At a stop the
// listener closes, the readers stop (what the kernel still held is never
// answered), the workers finish, the committer commits and answers, and the
// writers send the answers, bounded by DrainTimeout; what is not answered
// then the clients send again to the next daemon. Nothing is acknowledged
// that is not committed; what is resent arrives twice with the same
// event_id, which the Reporting API counts as a duplicate.
//
// # A hostile peer
//
// Whoever can reach the socket is bounded: Options.MaxConnections in all and
// MaxConnectionsPerUID per uid (SO_PEERCRED, root included), refused with an
// Error frame at accept; HELLO within HelloTimeout; after it every frame,
// from its first byte to its last, within IdleTimeout of the read that
// began it (clients learn the bound in WELCOME and send PING when idle),
// else the connection is answered what it published, told why and closed.
// A frame's buffer grows with the bytes that arrive (wire.Reader), never to
// the length announced before they do; what is read and unanswered is
// bounded by the budget above, and each subscriber by its queue.
//
// # The tap
//
// The Hub fans committed records out to subscriptions: mapped events
// matched by their event_type, raw bodies (redacted by Options.Hub.Redact,
// the --dump rendering) matched by the notification's event type or the
// message's tag. Inputs call Offer after their commit: the channel's
// committer here, and the AMQP consumer through broker.Tap (cmd/ adapts
// it). Offer costs one atomic load while nobody subscribes, and never
// blocks: records wait in a channel bounded by PendingBytes, past which they
// are dropped (hub_overflow). One hub goroutine matches each record against
// each subscriber's expressions, checks the subscriber's credentials against
// the record's bits (root always; owner, group — primary or supplementary,
// from SO_PEERGROUPS — others, as for a file), and encodes a DELIVER onto
// the subscriber's outQueue, bounded by SubscriberQueueBytes: past it the
// delivery is dropped and counted for that connection alone, and the
// connection's count rides on its next delivery. Raw bodies are shown with
// the owner's read bit only (Perm & 0400): to the owner and to root.
//
// # Concurrency
//
// Counters are Prometheus collectors (safe for concurrent use). The hub's
// subscriber list and each subscriber's subscriptions are copy-on-write
// snapshots behind atomic pointers, written under Hub.mu by the readers and
// read without a lock by the hub goroutine. An outQueue is a mutex-guarded
// set of buffers the writer swaps out whole. Run may be called once; Close
// from any goroutine, any number of times.
package channel
