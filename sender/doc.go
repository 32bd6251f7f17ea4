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
//	413          halve the batch limit and retry at once. A single event
//	             refused alone is dropped (and counted) only when it is
//	             larger than MaxEventBytes (64 KiB); a smaller one is kept
//	             and retried with backoff, since the limit then describes
//	             the destination rather than the event
//	429, 503     wait as Retry-After says (seconds or an HTTP date), or
//	             back off when it is absent
//	401, 403     keep the events, retry every AuthRetryInterval (or as soon
//	             as the token file changes), log an error, Ready != nil
//	other        back off exponentially with jitter up to BackoffMax
//
// After a 413 the limit grows back gradually: by a quarter after every
// few full batches that succeed, never straight to BatchMax, and not past
// the size last refused until many batches succeeded just below it. A
// destination with a smaller body limit thus settles on a size that fits.
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
