// Package runtime is the WebAssembly host of the collector: it loads mapper
// modules (ABI v1, docs/abi.md) into wazero and runs them under sandbox limits.
//
// # Life of a module
//
// Engine.Load compiles a module once (through the on-disk compilation cache, so a
// restart does not recompile), checks its imports and exports against the ABI,
// starts a first instance, calls its _initialize if it has one, and reads its
// manifest. Anything wrong is an error that names the module and the reason and
// wraps ErrInvalidModule. Compilations are serialised per engine (each uses
// every core already; concurrent compilations of one module's bytes were seen
// to panic inside wazero 1.12).
//
// Engine.Inspect answers a module's manifest without keeping the module: with
// Config.CacheDir it reads <CacheDir>/tally-manifests-v1/<sha256>.json, the
// manifest stored beside wazero's compilation cache under the SHA-256 of the
// module's bytes, and compiles nothing; otherwise it loads the module, reads
// the manifest, closes the module and stores the manifest there. A stored
// manifest passes the same checks as the guest's answer or is ignored. The
// catalogue uses it for a built-in module the build recorded no manifest for
// (the daemon's are all recorded: mappers.Manifests).
//
// The compilation cache (Config.CacheDir) is wazero's file cache; its key
// covers the bytes compiled (after the metering pass, whose version is in
// them), wazero's version, the CPU's features and the termination checks. An
// entry wazero cannot read back fails its compilation: the engine then
// removes the damaged entries and compiles once more (cachecheck.go).
//
// What closing frees: Module.Close closes the instances (their linear memory
// is then garbage) and the wazero.CompiledModule. CompiledModule.Close drops
// the engine's reference to the compiled code; the executable memory is
// unmapped by a finalizer once nothing refers to it, so after the next
// garbage collection. The on-disk cache is kept: the next Load of the same
// bytes reads the machine code from it instead of compiling.
//
// A Module keeps a pool of instances, grown on demand up to Config.PoolSize.
// Module.Map takes an idle instance (or starts one, or waits for one), writes the
// input into guest memory (tally_alloc), calls tally_map, validates the output,
// writes each event out under the event contract (event.go: required members
// checked, what breaks the contract elsewhere left out and counted in
// Result.Dropped, strings decoded, the host's "source" filled in, and where
// each member the completeness ledger reads was written noted in
// Result.Keys), and puts the instance back. After any failure but a guest error or an event that
// breaks the contract (ReasonInvalidEvent) the instance is closed and a fresh
// one is started by the next call that needs it.
//
// # Input
//
// The caller parses each message once into a jsonindex.Index and passes it to
// Map. The guest receives the raw bytes and may look members up through the
// tally.field import (one path) or tally.fields (many paths in one call), both
// of which answer from that Index: tally.field through one jsonindex.Cursor
// per call (a path with the same parent as the previous one resumes from that
// parent), tally.fields with jsonindex.LookupMany (the paths looked up
// together, each container they share searched once for all of them), the
// answers the same either way: the guest never needs to parse JSON itself.
//
// # Output
//
// A guest answers tally_map with a document ({"events":[...]} or
// {"error":...}), which the host parses and checks, or it hands its events to
// the host as a table of operations through the tally.emit import (emit.go,
// docs/abi.md "emit") and answers 0: the host checks each operation, writes
// the document the operations describe, noting where each member lies, and
// applies the event contract to those notes without parsing anything again.
// Either way the events are written out under the same contract (event.go),
// so the same members give the same events, byte for byte.
//
// # Limits
//
//   - Memory: Config.MemoryLimit per instance (wazero's page limit). A guest
//     that traps near the limit, or whose stderr reports running out of memory,
//     fails with ReasonMemory.
//   - Time: Config.CallTimeout per call (or the caller's deadline if earlier),
//     enforced by one watchdog goroutine per engine that scans the deadlines
//     of the calls in progress. How an overrun is stopped depends on the
//     module's Guard (see WithGuard): guarded code checks for termination at
//     loop heads and is stopped at the deadline; unguarded code cannot be
//     stopped, only detected. GuardWatched runs unguarded code on a goroutine
//     of the instance's own (the hand-over), so that its caller is answered
//     at the deadline and the instance abandoned to its guest
//     (Engine.Runaways); a guest that calls the host after that is stopped
//     there. Compiled guest code cannot be preempted by Go: an abandoned
//     guest keeps its core, and a garbage collection waits for it to
//     return, every goroutine stopped meanwhile. Config.OnWatchedOverrun is
//     called before such a caller is answered (a daemon exits there), and a
//     call under GuardedCall runs the module's guarded code whatever its
//     Guard (a redelivery, a replay).
//   - Watched calls without the hand-over: an engine whose hook ends the
//     process says so (Config.OverrunEndsProcess, which the daemon sets).
//     Nobody would be answered at the deadline there, so a watched call
//     runs on its caller's goroutine and its instance has no goroutine of
//     its own. The watchdog sees its deadline as any other (the instance is
//     tracked and the deadline stored before the guest is entered, and the
//     watchdog runs on a goroutine of its own) and calls the hook while the
//     guest still runs. Should the hook return all the same, the caller
//     cannot be answered before the guest returns or calls the host (where
//     it is stopped): the call then fails with ReasonTimeout, counted in
//     Module.Overruns, and the module runs guarded, as after a GuardNever
//     overrun; nothing is abandoned.
//   - Instructions: with Config.Metered every module is rewritten before it
//     is compiled (runtime/internal/metering) to charge a budget at every
//     function entry and loop header and trap once it is spent; the host
//     sets Config.Budget before each call (metering.go). A call that spends
//     it fails with ReasonBudget and its instance is discarded, whatever the
//     module's Guard: the guest stops itself, so nothing is abandoned. The
//     budget is handed out in slices of BudgetSlice, and between two the
//     guest leaves its compiled code for Go and comes back: a garbage
//     collection waits for a running guest one slice at most.
//   - Output: Config.MaxOutputBytes per call; Config.MaxEventBytes per event
//     (larger events are left out and counted in Result.Oversize).
//   - Imports: only the "tally" host module and WASI preview 1 (no preopened
//     directories, no environment, no arguments; virtual clocks, sleeps and a
//     random source seeded from the input (sandbox.go); stdout and stderr
//     to the log, rate-limited).
//
// A caller that loads a module on its first call reports a load that failed
// as a MapError of ReasonLoad (no guest code ran).
//
// # Concurrency
//
// Engine and Module are safe for concurrent use; Map holds no lock while the
// guest runs. An instance serves one call at a time. Module.Close waits for
// calls in flight (not for abandoned ones). A jsonindex.Index passed to Map is
// only read, and only during the call: an abandoned guest's host calls take
// the instance's host lock and find the call abandoned, and its caller takes
// that lock once before it returns, so none reads the index afterwards.
//
// # Allocation
//
// A successful unguarded call allocates nothing but the copy of its events (one
// buffer, the slice of events and the slice of their ledger keys);
// GuardWatched adds none (the hand-over uses the instance's two channels, and
// without it there is nothing to add). Guarded calls add wazero's per-call
// watcher (a goroutine and a channel per exported-function call).
package runtime
