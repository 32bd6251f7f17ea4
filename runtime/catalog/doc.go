// Package catalog decides which mapper module serves which event type, and
// keeps that answer current while modules are added, replaced, migrated and
// removed on a running collector.
//
// # Model
//
// A module is identified by the name in its manifest; name@version is one
// version of it. The catalogue holds, per name, a slot:
//
//	builtin    the module built into the binary under that name, if any
//	active     the version in service: the built-in, or a drop-in file
//	candidate  during a migration, a new version running in shadow
//
// The state of a name is active, or migrating while it has a candidate. Routing
// looks only at active modules: for an event type, the module whose best
// matching include glob has the most literal characters wins
// (runtime.Manifest.Match); on a tie a drop-in beats a built-in, and among
// drop-ins (or among built-ins) the one whose file name sorts later wins, so
// "20-nova.wasm" beats "10-nova.wasm". Two active modules with an identical
// include glob are reported as a conflict in Status.
//
// # Sources
//
// Built-in modules (Options.Builtin) are known to New by their manifests
// only: the record the build made beside each (Options.BuiltinManifests,
// mappers.Manifests), so nothing is compiled at start; for a module without
// a record, runtime.Engine.Inspect (from the manifest stored beside the
// compilation cache, or read by compiling the module once and closing it).
// A module whose answer differs from its record fails to load;
// they stay in the catalogue for its life, as the fallback of their name. A
// built-in module is compiled and given its first instance when the first
// call routed to it arrives (see "Built-in modules on first use"). Drop-in
// modules are the *.wasm files of Options.Dir (dot-files such as a
// ConfigMap's ..data left out; see "Files that are skipped"). A drop-in nova.wasm may ship fixture
// pairs in nova.fixtures/ beside it (*.in.json and *.out.json, see package
// runtime/fixture); they must all pass before the module takes traffic.
//
// A drop-in is taken as follows:
//
//   - At a first start (New, nothing saved; see Restarts), every valid module
//     of the directory is active at once, overriding a built-in of the same
//     name: the directory as it stands is the configuration. Two files of one
//     name: the higher version by semver precedence wins (1.0.0-rc.10 is above
//     1.0.0-rc.2), the other is parked.
//   - Later, a module whose name is new is active at once.
//   - Later, a module with the name of an active one is a new version: it
//     starts as the candidate in shadow (Options.Promote = PromoteShadow, the
//     default) until Promote or Abort, or it replaces the active version at
//     once (PromoteImmediate). A newer candidate replaces an older one.
//   - A module that does not compile, breaks the ABI, imports anything but
//     tally and WASI, or fails one of its fixture pairs is rejected: it never
//     replaces anything, the reason is logged and shown in Status, and the file
//     is not tried again until its content changes.
//   - Removing a file removes what it serves, and deletion wins over a
//     migration: removing the active version's file or the candidate's cancels
//     the migration; with the active file gone the name falls back to its
//     built-in (or disappears), and a candidate in another file is parked, not
//     promoted by the back door. Parked files stay out until their content
//     changes.
//   - An unreadable directory changes nothing.
//
// # Files that are skipped
//
// A drop-in file is read only when it is a regular file of at most
// Options.MaxFileSize bytes, reached directly or through symbolic links that
// resolve inside Options.Dir (a ConfigMap's keys link through ..data). The
// scan examines each file with stat before it opens anything; the read opens
// with O_NONBLOCK, so a FIFO cannot block it, checks the open file again
// (fstat: regular, the size, the inode the scan saw) and reads through a
// limit of the cap plus one byte. A fixture file is read the same way. What
// fails this is skipped: never compiled, a FileStatus "skipped" with the
// reason (ErrNotRegular, ErrTooLarge, ErrOutsideDir, or the error of a link
// that cannot be resolved), logged and counted once per stat of the file.
// A skipped file changes nothing else, like a rejected one, and never stops
// the reload of the others.
//
// # Restarts
//
// With Options.State (the daemon passes its outbox) the catalogue saves its
// decisions after every change that alters them: per module name the
// SHA-256 of the version in service and of the candidate shadowing it (with
// the migration's start), the SHA-256 and reason of every parked file, and
// the decisions of other replicas still deferred (see Replicas).
// Versions are known by content, so renaming a file changes nothing. The
// start-up scan places the drop-ins against what was saved, the version that
// was in service first:
//
//   - the version in service before the restart is in service again;
//   - a parked file stays parked with its reason;
//   - another version of a name whose saved version is present is placed as
//     if it had been dropped in after the start: the candidate goes back into
//     shadow (its counters and samples start again from zero, its start time
//     is kept), and a file added while the collector was stopped becomes a
//     candidate (or, with PromoteImmediate, active);
//   - when the saved version of a name is gone (its file removed or changed,
//     or the built-in replaced by an upgrade), deletion wins: the saved
//     candidate is parked, and the other versions are taken as at a first
//     start;
//   - a name with nothing saved is taken as at a first start.
//
// Nothing is saved before the directory was read once, so a start that
// cannot read it (a volume not mounted yet) does not erase the decisions:
// the built-ins serve, and the first scan that reads the directory, when it
// appears, places its files against the saved decisions as the start-up
// scan would have. An
// unreadable or unknown record is logged and ignored (a first start); a
// failed save is logged, and the decisions hold in memory until the next
// change saves them. The record is a few hundred bytes and is written only
// when a decision changes, never on the mapping path.
//
// # Replicas
//
// Several collectors may serve one deployment, each with its own drop-in
// directory and outbox. A promote or abort is an operator's decision about
// one candidate, which the catalogue hands, once it took effect here, to
// Options.OnDecision as a Decision: the action, the module name, the
// candidate's SHA-256, the replica (Options.Replica) and the time. The
// catalogue knows nothing of how it travels; cmd gives it to the broker's
// control link, which delivers it to every replica, and hands what it
// receives to ApplyDecision. There:
//
//   - a candidate in shadow with that SHA-256 is promoted or aborted, the
//     outcome's reason naming the replica that decided;
//   - the replica's own decision, come back, and a decision already in
//     effect (the version in service, or its file parked) are ignored;
//   - a decision whose candidate is not in shadow here (the file has not
//     arrived, or was rejected) is deferred: kept with the saved decisions,
//     so a restart keeps it, and applied as soon as that version becomes a
//     candidate here. A newer promote of a module replaces a deferred one;
//     at most MaxDeferred wait, the oldest dropped past that;
//   - a decision that contradicts what this replica did (promoting a version
//     parked here, aborting the version in service here) is ignored and
//     logged. Versions are only compared by content, so the same file under
//     another name is the same candidate.
//
// An operator's decision here supersedes the deferred decisions about the
// same candidate (and, for a promote, the deferred promotes of the module).
// Decisions are counted in tally_collector_mapper_decisions_received_total
// and shown, while deferred, in Status.Deferred.
//
// # Shadowing
//
// During a migration the Mapper that Route returns calls the active module,
// then the candidate with the same input, and returns the active module's
// result only. The two outcomes are compared: same failure reason, or the same
// events in the same order as JSON values with source.mapper left out.
// Matches and differences are counted per event type (bounded) and in
// tally_collector_mapper_shadow_comparisons_total{mapper,result}; the last
// Options.SampleSize differences are kept with both outputs. The candidate's
// events are never committed.
//
// # Concurrency and the atomic swap
//
// Route reads an immutable snapshot behind an atomic.Pointer and caches its
// answers per snapshot; no lock is taken on that path and none is held across
// a mapper call. Reloads are serialised; a reload compiles, validates and
// tests new modules before taking the state mutex, then builds and publishes
// a new snapshot. Replaced modules are closed only after the new snapshot is
// published, in the background: runtime.Module.Close waits for the calls in
// flight, so they finish on the old instance. A call routed just before a swap
// that reaches its module after the close gets runtime.ErrClosed before
// anything ran; the returned Mapper then routes it again on the newest
// snapshot. So no notification is mapped twice or lost by a reload.
//
// Every exported method is safe for concurrent use. Run follows the
// directory (fsnotify on the directory itself, debounced, plus a periodic
// scan); Reload does one scan on demand. Reloads run one at a time; Reload
// and Close wait for the one in progress no longer than their ctx, and Run
// does not wait for it at all once its ctx is done, so a read that never
// returns (a file system that does not answer) cannot hold a stop. Named gives a Mapper that stands for
// a module name and so follows reloads, for chains resolved once (plog).
//
// # Built-in modules on first use
//
// Ten Go modules cost about 20 MiB each once compiled and started, whether or
// not the cloud runs their service; so a built-in module is loaded by the
// first call that needs it (lazy.go). Routing, Status and the migration rules
// need only the manifest. On the hot path, once loaded, Map is one atomic
// load before the module's own Map: no lock is taken. Concurrent first calls
// load it once: the first does the work, the others wait for it or for
// their ctx. A load that fails answers that call, and every call in the next
// 30 seconds, with a *runtime.MapError of runtime.ReasonLoad, which the
// pipeline reports as Failed (the broker dead-letters the notification, to be
// replayed); it is counted and logged, and the load is tried again after
// that. ModuleInfo.Compiled and tally_collector_mapper_builtins_compiled show
// which built-in modules are in memory. When New had to compile modules to
// read their manifests (no record, nothing stored yet), it hands their memory back to
// the system at once (debug.FreeOSMemory), so a first start settles where a
// later one does.
//
// # Metrics
//
//	tally_collector_mapper_reloads_total{result}   reloads that changed something or failed (ok, error)
//	tally_collector_mapper_last_reload_ok          1 when the last such reload took every change
//	tally_collector_mapper_files_skipped_total{reason}   files not read: not_regular, too_large, outside_dir, unreadable
//	tally_collector_mapper_shadow_comparisons_total{mapper,result}   match, difference
//	tally_collector_mapper_migrations              migrations in progress
//	tally_collector_mapper_decisions_received_total{action,result}   decisions of other replicas: applied, deferred, ignored
//	tally_collector_mapper_decisions_deferred      decisions waiting for their candidate
//	tally_collector_mapper_builtins_compiled       built-in modules compiled and in memory
//	tally_collector_mapper_builtin_compiles_total{result}   loads of built-in modules on first use: ok, error
//
// # Dead letters
//
// ListDeadLetters, ShowDeadLetter (credentials redacted) and Replay work on
// an *outbox.Outbox directly; NewHandler serves them and the migration
// controls over HTTP, and Client calls that HTTP face of a running daemon.
// Replay maps letters again through a pipeline (and so through the catalogue
// as it stands), commits the events to the outbox, and removes a letter only
// after its events are committed.
package catalog
