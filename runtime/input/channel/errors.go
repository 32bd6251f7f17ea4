package channel

import "errors"

var (
	// ErrOptions: Options are missing or out of range; the message names
	// every problem.
	ErrOptions = errors.New("channel: invalid options")
	// ErrSocketInUse: another process serves the socket path.
	ErrSocketInUse = errors.New("channel: socket in use by another process")
	// ErrClosed: the server was closed.
	ErrClosed = errors.New("channel: server closed")

	errRawUnavailable       = errors.New("raw notifications are not available on this daemon")
	errTooManySubscriptions = errors.New("too many subscriptions on this connection")
)

// Reasons a message is dropped (a label of
// tally_collector_channel_dropped_total), sent back in its Refused Ack.
const (
	dropCredentials = "credentials"  // uid or gid differ from the connection's, and the peer is not root
	dropInvalidType = "invalid_type" // neither STRING nor JSON
	dropInvalidJSON = "invalid_json" // type JSON, data that does not parse
	dropInvalidTag  = "invalid_tag"  // empty, too long, or with control characters
	dropTooLarge    = "too_large"    // data over the daemon's bound
	dropMode        = "mode"         // published on a connection opened to subscribe only
)

// Reasons a tap delivery is dropped (a label of
// tally_collector_channel_tap_dropped_total).
const (
	dropSlowSubscriber = "slow_subscriber" // the subscriber's queue was full
	dropHubOverflow    = "hub_overflow"    // the hub was behind by more than its bound
	dropPermission     = "permission"      // the subscriber's credentials do not pass the message's bits
)
