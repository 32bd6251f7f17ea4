// Package outbox is the collector's durable buffer between the bus and the
// Reporting API: an ordered queue of canonical events plus a dead-letter
// area, stored in Badger v4 in one directory.
//
// # Guarantee
//
// Append returns nil only after its events are synced to disk in one
// transaction; the consumer acknowledges deliveries after that and not
// before. BeginAppendCounted (BeginAppendKeyed with the events' ledger
// keys) is the same append without the wait (see
// "Pipelined appends"): its Pending reports the durability. Events leave the outbox only through Delete of an explicit range
// the sender had delivered. Between the two an event exists here and
// nowhere else, so nothing else deletes, truncates or rewrites events.
//
// # Key layout
//
//	'l' + uint64 big-endian seq   segment: the events of one Append (or of one
//	                              part of a large one), seq being the first's
//	'd' + uint64 big-endian seq   dead letter: value = JSON of DeadLetter
//	'g' + kind + ...              the completeness ledger (ledger.go): deltas
//	                              written in the transactions they count, their
//	                              hourly sums, the identities of the last events
//	                              delivered
//	'u' + uint64 big-endian seq   marker of an Undeliverable dead letter under the
//	                              same seq: value = its size as stored (uint64 BE),
//	                              written and deleted with it, so that their budget
//	                              (MaxUndeliverable) is counted at open without reading the letters
//	'm' + name                    metadata:
//	    mlast_event  uint64 BE    highest event sequence ever assigned
//	    mlast_dead   uint64 BE    highest dead-letter sequence ever assigned
//	    mhead        uint64 BE    the drain cursor: first event sequence not yet delivered
//	    mformat      uint64 BE    the format version of the store (below)
//	    mrec/<name>  bytes        a record of another part of the collector
//	                              (SaveRecord, LoadRecord: the mapper catalogue's
//	                              decisions under "catalog"), at most 1 MiB
//
// A segment holds consecutive sequences, at most 1,024 events or 256 KiB of
// them (a single larger event gets a segment of its own). Its value is:
//
//	byte     format, 1
//	8 bytes  append time, unix nanoseconds, big-endian
//	uvarint  number of events n
//	n uvarint  length of each event
//	rest     one S2 block (github.com/klauspost/compress/s2) of the events, concatenated
//
// One key per commit instead of one per event, and the events of a commit
// compressed together (canonical events share most of their member names
// and many values: 3 to 10 times smaller), is what keeps the write path
// cheap: fewer entries in the memory table, fewer pages written and synced
// per commit, smaller tables to flush and compact. The lengths stay outside
// the compressed block so that depth and bytes are counted without
// decompressing.
//
// 'l' sorts just below 'm' with no other prefix in between. An append
// writes the newest segment and mlast_event, so a memory table of appends
// spans only the newest segments; under a prefix above 'm' it would span
// every segment, and each compaction of it would rewrite the whole next
// level (measured: on a nearly full disk a compaction at Close then ran
// past the free-space reserve). 'e' keys (one event per key) are the first
// format's; its migration rewrites them as segments (below).
//
// Big-endian sequences make the byte order of keys the order of appends,
// so a forward iteration from the cursor's segment yields the oldest events
// first. Sequence 0 is never assigned; the key 'l'+0 is a transient
// sentinel used by the disk reclaim (below) and never read.
//
// # Format versions
//
// mformat holds the version of the layout the store is in (formatVersion
// for this build). Open reads it before anything else:
//
//   - a version above formatVersion is refused with ErrFormatTooNew, which
//     names the version, and the outbox writes nothing;
//   - a version below it is migrated, one version at a time, by
//     migrations[v]; the marker moves to v+1 once that step is complete;
//   - a store without the marker predates it: format 1 when it holds 'e'
//     or 's' keys, format 2 otherwise (a new store included). It is then
//     marked.
//
// Format 1 stored one event per key, 'e' + seq, its value the append time
// (8 bytes) then the event; a few builds after it stored segments under 's'
// (above the metadata), which its migration moves as they are. Format 2
// stores segments ('l'). Dead letters
// and the metadata keys are the same in both; records (under 'm') came
// later in format 2, and a store without them reads as having none.
//
// A change of what is stored (a key's meaning, a value's encoding, keys that
// an earlier build would misread) adds a version:
//
//  1. raise formatVersion to v+1 and add migrations[v], written so that it
//     can be cut short anywhere and run again: each of its transactions
//     leaves a store the same migration reads (see migrateSegments);
//  2. keep testdata/format-v<v> as it is, write testdata/format-v<v+1>
//     with TestWriteGoldenStore (testdata/README.md) and add it to
//     goldenStores: every build must open each golden store and deliver it;
//  3. describe the format above and in docs/outbox.md, "Upgrading".
//
// New keys under a new prefix that an earlier build never reads need no new
// version, as long as a downgrade does without them.
//
// # Invariants
//
//   - A sequence is never reused. The highest assigned sequence is written
//     in the same transaction as the events, so it survives restarts even
//     after the outbox drained to empty.
//   - Events with lower sequences are committed before events with higher
//     ones: appends are serialised, so the drain cursor never passes a
//     sequence that could still appear. Readers see only what is durable
//     with everything before it (below).
//   - Every segment whose events all lie before the cursor is deleted in the
//     transaction that moves the cursor past it; at most one live segment
//     holds delivered events (the first, partly delivered).
//   - Depth (undelivered events) and bytes are counted at Open from the
//     segment headers, from the cursor on, and then maintained in memory by
//     Append and Delete.
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
// # Pipelined appends
//
// An append is two stages: sequenced and handed to Badger's writer
// (Txn.CommitWith), then durable once Badger answers that its write is
// synced. BeginAppendCounted returns after the first, so that the caller
// sequences the next append while the store syncs this one; Append and
// AppendCounted are BeginAppendCounted followed by the wait. A large append
// may be several transactions (units); the append is durable with its last.
// Units are cut by Badger's bounds on a transaction, counting the segments
// and the ledger's counts of their events together; the counts of the
// notifications (the tally) go in the last unit, or in a unit of their own
// when they do not fit there.
//
//   - Units are handed over in sequence order (appendMu), and Badger writes
//     its requests in the order they were handed over, but answers them on
//     goroutines of their own, in any order. The outbox completes units
//     strictly in sequence order: a unit is durable, and its Pending
//     settles nil, only when Badger answered nil for it and for every unit
//     before it. A caller that acknowledges on that answer therefore never
//     acknowledges before its own append, nor an earlier one, is durable.
//   - When a unit fails, it and every unit after it that has not completed
//     fail too, even those Badger wrote: their Pending settle with the
//     failure's ErrRefused, and their callers requeue them. The outbox is
//     then broken until a repair: the next append (or Close) waits until
//     nothing is in flight and, in one synced transaction, deletes every
//     key the failed units wrote (segments, ledger deltas) and sets
//     mlast_event back to the last durable sequence. So the store holds no
//     hole between its cursor and its last sequence, and the withdrawn
//     sequences are assigned again: no reader saw them and the witness never
//     named them.
//   - Readers: Peek (and so Delete, which removes only what Peek returned)
//     reads no segment past the last durable sequence, kept in memory and
//     moved at each completion; a unit in flight, or written after a failed
//     one, is neither seen nor deleted. (Badger's own reads wait for writes
//     in flight, and would show a unit written after a failed one.)
//   - At sequencing: the in-memory next sequence (lastSeq), the ledger
//     delta's id, and the events in flight, which count against MaxEvents
//     (the bound admits depth + in flight + the new batch). Written in the
//     unit's transaction: its segments, its ledger delta, mlast_event.
//   - At durability, in sequence order: depth and bytes, the last durable
//     sequence, the witness (COMMITTED), the fold's count of deltas, and
//     health (a durable append makes Healthy answer nil again). At a
//     failure, in sequence order: the refused counter (once per failure)
//     and the health error.
//   - Dead letters are not pipelined: AppendDeadLetters commits and syncs
//     before it returns, under their own sequence. A caller that writes a
//     batch's events pipelined and its dead letters after them acknowledges
//     the batch when both are durable; if the events then fail, the dead
//     letters stay and come again with the redelivery (as events committed
//     before failed dead letters always did).
//   - Badger makes a new write transaction wait until every commit handed
//     over before it has settled. A background goroutine therefore keeps
//     one transaction made ahead (renewed every second while unused): made
//     while a unit was being prepared, it waits only for the units before
//     that one, so the next unit is handed over while its predecessor
//     syncs. Units never read in their transaction and conflict detection
//     is off, so its earlier read timestamp changes nothing written.
//   - The reclaim (DropPrefix) and Close take the write lock exclusively;
//     every unit holds its shared side from its hand-over until Badger
//     answers, so neither runs under a write in flight.
//   - A crash while broken, before the repair, can leave a unit on disk
//     after a missing one; Open then reports the missing sequences as damage
//     (ErrCorrupt, ACCEPT-DAMAGE). No acknowledged event is among them: their
//     appends were answered with an error. The ledger may count such a
//     unit's events twice if a fold ran before the repair, as for any
//     commit that reached the disk and answered an error.
//
// # Files and damage
//
// The directory is 0700 and its files 0600 whatever the umask (see Open).
// Beside Badger's files, the outbox keeps COMMITTED: the highest event and
// dead-letter sequences committed, written in place after every commit
// (not synced; it only ever lags the store). At Open, a store whose
// sequences are below it, with a hole between the cursor and the last
// event, or with a dead letter in the value log that fails its checksum,
// lost acknowledged data that Badger dropped without an error (it replays
// its write-ahead log only up to the first bad entry). Open then answers
// ErrCorrupt naming docs/outbox.md, "When the store is damaged", unless the
// operator created ACCEPT-DAMAGE in the directory: then the unreadable dead
// letters are removed, the missing events counted in
// tally_collector_outbox_damaged_events_total, and the store used as it is.
//
// # What the ledger reads from an event
//
// The ledger (ledger.go, package ledger) counts each event in an intake row
// (its source.exchange and event_type) when it is appended, and in a stored
// row (the hour of its timestamp, its project_id and resource_type) and by its
// identity (event_id and timestamp) when it is delivered or refused. An append
// takes the events as ledger.Keyed: the bytes and, when the host's event
// writer produced them, where it wrote those six members (ledger.Keys). The
// append then reads the members from there (ledger.Reader.ReadKeyed) and does
// not parse the event. An event without keys (appended with Append or
// AppendCounted, or an event the Reporting API refused that a replay commits
// again as it is) is parsed (ledger.Reader.Read). Both answer the same for the same event, and the keys
// are not stored: a delivery, and a reading of the ledger (the pending
// events), parse the events they read back from the store.
//
// # Draining
//
// The sender calls Peek(ctx, n) for the n oldest events and their first and
// last sequence, delivers them, then Delete(ctx, first, last). The cursor
// may point into a segment: Peek decompresses it and skips what was
// delivered; Delete removes the segments whose events are all delivered,
// keeps a partly delivered one, and stores the new cursor in the same
// transaction, so a restart resumes from it. Both seek directly to the first
// live segment (kept in memory) instead of the start of the prefix: deleted
// keys stay in the LSM tree as tombstones until compaction, and re-walking
// them costs. A batch delivered but not yet deleted when the process dies is
// delivered again after the restart; the Reporting API counts it as
// duplicates.
//
// A segment that cannot be read back (its S2 block or its header damaged)
// does not stop the drain: Peek moves its stored bytes to the dead-letter
// area (ReasonDamagedSegment) and the cursor past it in one transaction,
// counts its events in tally_collector_outbox_damaged_events_total and logs
// the range. At Open an unreadable header is counted up to the next segment.
//
// # Disk reclaim
//
// Segments live in the LSM tree (not the value log), so value-log GC frees
// nothing and deleting segments only adds tombstones. When the outbox is
// empty and at least ReclaimAfterBytes (stored, compressed bytes) were
// delivered since the last reclaim, a background goroutine drops every
// segment key with DropPrefix, which removes whole tables (appends wait
// meanwhile: about a second for a few hundred megabytes). While a backlog remains, a Flatten
// compacts the tree once the delivered bytes reach half of the store's
// size. docs/outbox.md has the measurements.
//
// # Concurrency
//
// Every method is safe for concurrent use. Append calls are serialised
// among themselves as far as their hand-over to the store (their syncs
// overlap); AppendDeadLetters and DeleteDeadLetters among
// themselves; Peek and Delete among themselves (one drain cursor: run one
// sender per outbox). Appends and the drain proceed in parallel. One
// process per directory: Open answers ErrLocked when the directory lock is
// held, by another process or another Outbox of this one.
//
// # Locks
//
// Seven locks, each guarding the fields listed under it in the Outbox
// struct. A goroutine that holds one takes only locks below it in this
// list, never one above, so no two goroutines wait for each other:
//
//  1. appendMu: sequencing an append and handing its units over (lastSeq,
//     the segment scratch, the append's ledger reader). Held by
//     beginAppend for the hand-over (not the sync), by the reclaim that
//     drops every segment (dropEvents) and by Close for its repair.
//  2. readMu: the drain cursor and what moves with it (Peek, Delete,
//     Delivered, SetAside; the recent set and the delivered events' ledger
//     reader). Never held together with appendMu: an append and the
//     drain run side by side, and Close takes the two one after the other.
//  3. foldMu: one fold of the ledger at a time (foldLedger).
//  4. deadMu: the dead-letter sequence and its writes (AppendDeadLetters,
//     DeleteDeadLetters, ReplaceDeadLetters, quarantine under Peek,
//     SetAside).
//  5. writeMu, a read-write lock: its shared side is held by every write
//     transaction from its start to Badger's answer. An append's unit takes
//     it when opened and gives it back when it settles, on Badger's
//     goroutine: the lock is not tied to a goroutine. Its exclusive side is
//     taken by the reclaim that drops every segment (dropEvents, after
//     appendMu) and by Close (after readMu), so neither runs under a write
//     in flight.
//  6. pipeMu: the units in flight, the first failure and the units behind
//     it (settle, complete, repair, failAfter).
//  7. healthMu: the health error; nothing is taken under it.
//
// Everything else is an atomic, a channel, or set once at Open. No lock is
// held across a wait for Badger's sync: the units' shared side of writeMu
// is the only one that lasts that long, and it only keeps a reclaim or Close
// waiting.
//
// # Reading a stopped collector's store
//
// Options.ReadOnly opens a store to read it (the ledger, the dead letters,
// the saved records) while no collector runs on it: the commands of a
// stopped daemon use it. Badger's read-only mode takes the directory lock
// shared, so readers coexist, a running collector refuses them (ErrLocked)
// and a collector cannot start while one reads. Nothing in the directory is
// written: no format migration, no damage acceptance, no witness, no ledger
// folding, no reclaim; writes answer ErrRefused wrapping ErrReadOnly. A
// store its writer did not close (a crash) cannot be read so, since Badger
// replays its write-ahead log only as a writer: ErrLeftOpen says to start
// the collector on it.
package outbox
