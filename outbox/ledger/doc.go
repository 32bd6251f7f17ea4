// Package ledger holds the collector's completeness ledger: durable counts,
// per hour, of what every input consumed and what became of it, and of what
// the sender delivered. The outbox stores it (in the same transactions as the
// events, dead letters and deletions it counts); this package defines the
// rows, their encoding, how they add up, and whether an hour balances.
//
// # Two tables
//
// Intake rows are keyed by hour, source (the exchange, or "channel" and the
// plog inputs) and event type. The hour is the one in which the collector
// took the notification (a batch committed together counts in the hour its
// first delivery was taken). Per row:
//
//	consumed       notifications taken
//	committed      of those, committed as events
//	skipped        of those, skipped, by reason
//	dead_lettered  of those, kept as dead letters, by reason
//	events         events committed to the outbox (under the event's own
//	               source.exchange and event_type)
//	delivered      events removed from the outbox after a 200 (once each)
//	duplicates     of the delivered, those the Reporting API answered it
//	               already had (copies and resends, see below)
//	refused        events the API refused, set aside as dead letters
//	damaged        events lost to an unreadable outbox segment
//	replayed       dead letters replayed into events
//
// Stored rows are keyed by the hour of the events' timestamp, project and
// resource type: the unit the Reporting API counts. Per row: delivered and
// copies, so that delivered minus copies is what the API must hold. A copy
// is an event whose (event_id, timestamp) another event of the outbox
// already had (a notification the broker redelivered after it was
// committed); an event sent again because the deletion after its 200 was
// lost in a crash is a resend: counted delivered once, and a duplicate in
// the intake rows only.
//
// # Balance
//
// An intake row balances when consumed = committed + skipped + dead_lettered
// (every notification accounted for once) and events = delivered + refused +
// damaged + pending, pending being the events still in the outbox.
//
// # Reading events
//
// What a row takes from an event (Event: its exchange, type, project, resource
// type, the hour of its timestamp, and its identity) is read by a Reader,
// either by parsing the event (Read) or, when whoever wrote the event says
// where those members are (Keys, handed over with the event as Keyed), from
// there without a parse (ReadKeyed). The two share everything after finding
// the members, so they answer the same for the same event.
//
// # Bounds
//
// Names and hours come from what publishers send; the rows they key are
// bounded all the same (bound.go): a long or unprintable name is folded to a
// prefix and a hash (Name), and a Cap admits at most MaxRowsPerHour keys per
// hour and table, the counts of the others going to the hour's Other row.
// A key goes to the same row for every count, so folded rows balance as the
// others do. GET /ledger serves a report in pages of hours (Report.Next).
package ledger
