// Package outbox is the collector's durable buffer between the bus and the
// Reporting API: an ordered queue of canonical events plus a dead-letter
// area, stored in Badger v4 in one directory.
//
// # Guarantee
//
// Append returns nil only after its events are synced to disk in one
// transaction; the consumer acknowledges deliveries after that and not
// before. Events leave the outbox only through Delete of an explicit range
// the sender had delivered. Between the two an event exists here and
// nowhere else, so nothing else deletes, truncates or rewrites events.
//
// # Key layout
//
//	'e' + uint64 big-endian seq   event: value = uint64 BE append time (unix ns) + event JSON
//	'd' + uint64 big-endian seq   dead letter: value = JSON of DeadLetter
//	'm' + name                    metadata:
//	    mlast_event  uint64 BE    highest event sequence ever assigned
//	    mlast_dead   uint64 BE    highest dead-letter sequence ever assigned
//	    mhead        uint64 BE    the drain cursor: first event sequence not yet deleted
//
// Big-endian sequences make the byte order of keys the order of appends,
// so a forward iteration from 'e'+cursor yields the oldest events first.
// Sequence 0 is never assigned; the key 'e'+0 is a transient sentinel used
// by the disk reclaim (below) and skipped by readers.
//
// # Invariants
//
//   - A sequence is never reused. The highest assigned sequence is written
//     in the same transaction as the events, so it survives restarts even
//     after the outbox drained to empty.
//   - Events with lower sequences are committed before events with higher
//     ones: appends are serialised, so the drain cursor never passes a
//     sequence that could still appear.
//   - Depth (undelivered events) is counted at Open by a key-only scan from
//     the cursor and then maintained in memory by Append and Delete.
//   - Depth never exceeds MaxEvents, except by a single batch appended to
//     an empty outbox. At the bound Append answers ErrFull and writes
//     nothing; when the write cannot be made durable (short of space, I/O
//     error) it answers ErrRefused. The two are distinct: the consumer
//     pauses on the first and retries the second.
//   - Writes are refused while the filesystem has less than MinFreeBytes
//     free. Badger writes its memory tables and tables through memory maps,
//     where a full disk would surface as a fatal SIGBUS instead of an error;
//     the reserve keeps the store from ever reaching that point.
//
// # Draining
//
// The sender calls Peek(ctx, n) for the n oldest events and their first and
// last sequence, delivers them, then Delete(ctx, first, last). Peek seeks
// directly to the cursor instead of the start of the prefix: deleted keys
// stay in the LSM tree as tombstones until compaction, and re-walking them
// on every read costs an order of magnitude in drain rate. Delete stores
// the new cursor in the same transaction, so a restart resumes from it.
// A batch delivered but not yet deleted when the process dies is delivered
// again after the restart; the Reporting API counts it as duplicates.
//
// # Disk reclaim
//
// Events of a few hundred bytes live in the LSM tree (not the value log),
// so value-log GC frees nothing and deleting events only adds tombstones.
// When the outbox is empty and at least ReclaimAfterBytes were delivered
// since the last reclaim, a background goroutine drops every event key with
// DropPrefix, which removes whole tables (appends wait meanwhile: about a
// second for a few hundred megabytes). While a backlog remains, a Flatten
// compacts the tree once the delivered bytes reach half of the store's
// size. docs/outbox.md has the measurements.
//
// # Concurrency
//
// Every method is safe for concurrent use. Append calls are serialised
// among themselves; AppendDeadLetters and DeleteDeadLetters among
// themselves; Peek and Delete among themselves (one drain cursor: run one
// sender per outbox). Appends and the drain proceed in parallel. One
// process per directory: Open answers ErrLocked when the directory lock is
// held, by another process or another Outbox of this one.
package outbox
