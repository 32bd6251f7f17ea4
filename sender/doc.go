// Package sender drains the outbox to the Reporting API
// (POST {REPORTING_URL}/api/v1/events).
//
// It needs only the small Store interface declared here, which the outbox
// satisfies; it never imports the outbox package.
//
// # The loop
//
// Peek up to the current batch limit of the oldest events, POST them as
// {"events":[...]} with the bearer token, and Delete the range only after a
// 200. Anything else keeps the events where they are:
//
//	200          delete the batch; count accepted, duplicates and the
//	             per-event rejections the answer lists
//	413          halve the batch limit and retry at once (a single event
//	             refused alone: see "Refused events" below)
//	400, 422     the API refuses what the batch holds: split it (below)
//	429, 503     wait as Retry-After says (seconds or an HTTP date), or
//	             back off when it is absent
//	401, 403     keep the events, retry every AuthRetryInterval (or as soon
//	             as the token file changes), log an error, Ready != nil
//	other        back off: a wait uniform in [0, step] (full jitter), the
//	             step doubling from BackoffBase to BackoffMax; after
//	             3 404s in a row (notFoundRun), Ready is an
//	             *EndpointNotFoundError naming the URL until another answer
//	             (REPORTING_URL does not lead to the events route)
//
// Every POST is counted in tally_collector_sender_requests_total by class:
// the answer's status class (2xx to 5xx), or network or timeout when there
// was no answer. Each class, and each status of
// tally_collector_sender_deadlettered_events_total, is exported at 0 from
// New on, so that an alert's increase() sees the first one.
//
// After a 413 the limit grows back gradually: by a quarter after every
// few full batches that succeed, never straight to BatchMax, and not past
// the size last refused until many batches succeeded just below it. A
// destination with a smaller body limit thus settles on a size that fits.
//
// # Refused events
//
// A batch answered 400 or 422 is split in halves, each sent on its own, the
// refused half split again, until the refused event is alone: log2 of the
// batch size in extra requests. A single event answered 400 or 422, or 413
// alone, is set aside: Store.SetAside moves it to the outbox's dead-letter
// area (reason ReasonRefused, the status and a redacted excerpt of the
// answer, at most 512 bytes, as the detail) and the cursor past it in one
// transaction, so that the head of the outbox never stays on one event.
// tally_collector_sender_deadlettered_events_total{status} counts them and
// each is logged at error level with its event_id. The batch limit is then
// as before the refusal.
//
// An event is set aside only when the refusal describes that event and not
// the API: the API took a batch since the last event was set aside (for a
// 413, a body at least as large as the refused one), or, lacking that, it
// takes the events right behind the refused one, sent on their own (one
// event after a 400 or 422; as many as make a body as large after a 413).
// When those are refused as well, the API refuses everything (a schema it
// no longer accepts, an ingress whose body limit is smaller than one
// event): nothing is set aside, the sender backs off and Ready wraps
// ErrRefusedByAPI until a batch is taken again. So a destination that
// refuses everything costs at most the one event refused first after a
// success. An event larger than MaxEventBytes (64 KiB) refused alone with
// 413 is set aside without that check: the pipeline never produces one.
//
// # Making room for a backlogged intake
//
// With Options.Intake set (cmd/ passes the broker consumer), Run holds back
// while Intake.Backlogged reports that the input is draining a backlog: it
// starts a POST at most once per YieldInterval (1 s), asking Backlogged
// again every 50 ms and going on at once when the backlog ends. A stretch
// of holding back lasts at most YieldFor (30 s); after that the sender goes
// at full speed until the backlog is seen over, so delivery is delayed by
// at most YieldFor. Flush never holds back. tally_collector_sender_yielding
// is 1 during a stretch and tally_collector_sender_yield_seconds_total adds
// up the waits.
//
// # Safety of the token
//
// The URL must be https unless Insecure is set. Redirects are never
// followed (a 3xx is a failure), so the token is only ever sent to the
// configured host. The token is never logged. With TokenFile, the file is
// checked before each request and re-read when it changed.
//
// # TLS
//
// The API's certificate is always verified, for the URL's host, against
// Options.TLS's CA file when set (REPORTING_CA_FILE) or the system's trust
// store; Options.TLS's client certificate and key are presented when the
// API asks for one. Before every POST the files' sizes and modification
// times are looked at; when one changed they are read again and a new
// client replaces the old one (whose idle connections are closed), so a
// rotated file needs no restart. A failed handshake keeps the events like
// any network failure, and its error says what to look at (internal/tlsfiles,
// Explain).
//
// # Crash safety
//
// A crash between the 200 and the Delete resends that batch after the
// restart; the Reporting API stores an event once per (event_id,
// timestamp) and counts the resend as duplicates.
//
// # Concurrency
//
// Run and Flush serialise their deliveries; call Flush after Run returned
// to drain what is left at shutdown. Ready is safe for concurrent use.
package sender
