// Package pipeline is the one path every input shares between a received message
// and the events that go to the outbox: decode, route by event type, map in
// WebAssembly, size checks.
//
// # What Process does, in order
//
//  1. A body over Options.MaxBodyBytes (1 MiB) is refused unread: Unparseable,
//     reason "body_too_large". A body with Message.Compression (kombu's
//     "compression" header) is inflated first, reading at most MaxBodyBytes of
//     output: past that it is Unparseable "decompressed_too_large" (a bomb costs
//     no more memory than the limit); a header that asks its decoder for more
//     memory than the codec's cap (an .xz or .lzma dictionary over
//     maxLZMADict, a zstd window over maxZstdWindow, a brotli large window,
//     more than one .xz block) is Unparseable "decoder_limit", refused before
//     any buffer is sized (docs/broker.md, section 4, states each codec's bound); an
//     unknown codec or a body that does not inflate is Unparseable
//     "bad_compression". The AMQP input keeps Unparseable bodies as dead
//     letters marked undeliverable, within a budget of their own.
//  2. The body is indexed once, natively (jsonindex). An oslo messagingv2
//     envelope ({"oslo.version":"2.0","oslo.message":"<string>"}) is unwrapped
//     in the same pass (jsonindex.ParseWrapped): the envelope's parse hands the
//     string to the inner message's index, which decodes its escapes into a
//     reused buffer while it indexes the decoded bytes, and finds where the
//     string ends; that buffer is what the module's input is copied from. It
//     refuses exactly what unescaping the string and indexing the result
//     refused (FuzzDecode holds those passes as the reference). A bare
//     messaging-v1 body is used as it is. Bytes that are not JSON
//     (msgpack, zlib, garbage) are Unparseable, reason "not_json", unless the
//     message names a module chain (Message.Modules), whose first module then
//     receives the bytes exactly as they arrived.
//  3. The event type is read from the index and decoded as a JSON reader
//     decodes it ("compute\u002einstance.exists" is compute.instance.exists);
//     routing, exclusions, Result.EventType and the ledger use that form.
//     None: Skipped "no_event_type". With Message.Canonical, a canonical event
//     is checked against the event contract (runtime.CanonicalWriter) and
//     passed through; one without a timestamp is given Message.Received.
//  4. The router (or the message's own chain) picks the module; none claims the
//     type: Skipped "unclaimed", or "versioned" for a versioned nova
//     notification (payload.nova_object.data), so that a format no module reads
//     is told apart.
//  5. The module maps the indexed message: with its guarded code
//     (runtime.GuardedCall) unless Message.FirstDelivery says the broker
//     will deliver it again should the process die on it (docs/abi.md, "When
//     a built-in module runs away"). A failure (trap, timeout, memory,
//     invalid output, an event that breaks the contract in a required member
//     (invalid_event), ABI, guest error) is Failed with the runtime's reason
//     and the error; the caller dead-letters the body. What the contract left
//     out of the events is counted
//     (tally_collector_event_members_dropped_total{reason}). Events over
//     Options.MaxEventBytes (64 KiB) are left out and counted: if nothing else
//     remains the outcome is Skipped "event_too_large".
//  6. With Message.DeriveID, the runtime gives an event without an event_id
//     one derived from the body (SHA-256, runtime.Source.DeriveID), so a
//     resent message carries the same id.
//
// Every outcome is counted (tally_collector_mapped_total, _skipped_total{reason},
// _unparseable_total{reason}, _mapper_failures_total{reason}); warnings are sampled (a
// burst of 20 a second) so a flood of bad input cannot flood the log, while the
// counters stay exact. Nothing is logged by
// content: an unparseable body is logged by size, exchange and routing key.
//
// # Concurrency
//
// Process is safe for concurrent use. Per-call scratch (indexes, the unescape
// buffer) comes from a sync.Pool, and no lock is held across a mapper call: the
// router answers from an immutable snapshot.
package pipeline
