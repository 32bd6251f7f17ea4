// Package client is the Go client of the collector's local message channel
// (docs/channel.md): a program on the collector's host publishes usage
// messages to the daemon over its Unix socket, subscribes to what the inputs
// commit, or both. It imports the standard library and the channel's frame
// codec (package wire) only, so any program may vendor it.
//
// A Client is made with New, which returns at once: the connection is made,
// and remade after a failure, in the background. Publish queues a message
// and never blocks; the queue is bounded (Options.QueueLimitBytes,
// SetQueueLimit) and a full queue answers ErrNoBufs at once, which wraps
// ENOBUFS as the C message channel answers it. What was not answered when a connection ended is sent again on
// the next one, and the daemon's answer (OnSettled, Flush) says Committed
// only once the message's events are durably in the outbox; the event id
// makes a message sent twice count once.
//
//	c, err := client.New(client.Options{Socket: sock, Name: "backup-job"})
//	...
//	_, err = c.Publish(client.Message{Tag: "usage.backup", Value: usage})
//	...
//	err = c.Close(ctx, false) // waits, bounded by ctx, for the daemon's answers
//
// A subscription (Subscribe, SubscribeWith) receives the events that match
// a regular expression or an exact name, through a callback or, without
// one, kept for Poll and Next. Callbacks run on goroutines of their own,
// never on the one that reads the socket: a slow callback delays neither the
// answers to publishes nor other subscriptions, and a callback may publish,
// subscribe, unsubscribe or Close.
package client
