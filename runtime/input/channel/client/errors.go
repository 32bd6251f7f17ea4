package client

import (
	"errors"
	"fmt"
	"syscall"
)

var (
	// ErrNoBufs: the message would take the outbound queue past its bound
	// (Options.QueueLimitBytes). Publish returns it at once and queues
	// nothing. It wraps syscall.ENOBUFS, the error the C message channel
	// answers in the same case.
	ErrNoBufs = fmt.Errorf("channel client: outbound queue full: %w", syscall.ENOBUFS)
	// ErrTooLarge: the message alone is larger than the queue bound or than
	// the protocol allows (wire.MaxData, wire.MaxTag). Larger than the queue
	// bound, the error also wraps syscall.ENOBUFS (the seed's answer to a
	// message that would take the queue past its bound), but not ErrNoBufs:
	// waiting never makes room for it.
	ErrTooLarge = errors.New("channel client: message too large")
	// ErrInvalid: an empty tag, an unknown type, or data of type JSON that
	// does not parse.
	ErrInvalid = errors.New("channel client: invalid message")
	// ErrMode: publishing on a subscribe-only client, or subscribing on a
	// publish-only one.
	ErrMode = errors.New("channel client: not allowed in this mode")
	// ErrClosed: the client is closing or closed.
	ErrClosed = errors.New("channel client: closed")
	// ErrRefused: the daemon refused a subscription (Subscription.Wait).
	ErrRefused = errors.New("channel client: subscription refused")
	// ErrNotSubscribed: the daemon had no subscription to remove
	// (Subscription.Close of one it had refused).
	ErrNotSubscribed = errors.New("channel client: not subscribed")
	// ErrOptions: Options are missing or out of range.
	ErrOptions = errors.New("channel client: invalid options")
)
