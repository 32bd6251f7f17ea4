package broker

import "errors"

var (
	// ErrTransportURL: TRANSPORT_URL cannot be parsed.
	ErrTransportURL = errors.New("invalid transport url")
	// ErrOptions: an option is out of range or missing.
	ErrOptions = errors.New("invalid broker options")
	// ErrQuorumUnsupported: a quorum queue was asked for on a broker older than
	// RabbitMQ 4.0, where x-delivery-limit -1 would drop a message on its first
	// requeue. QUEUE_TYPE=classic is the setting for such a broker.
	ErrQuorumUnsupported = errors.New("quorum queue refused on a broker older than rabbitmq 4.0")
	// ErrQueueTypeMismatch: the queue exists with the other type. Nothing is
	// deleted; the session retries later.
	ErrQueueTypeMismatch = errors.New("queue exists with another type")
	// ErrNoExchanges: none of the listed exchanges exists on the broker.
	ErrNoExchanges = errors.New("none of the listed exchanges exists")
	// ErrExchangesMissing: REQUIRE_EXCHANGES is set and at least one listed
	// exchange does not exist.
	ErrExchangesMissing = errors.New("required exchanges missing")
	// ErrNotConsuming is what Ready answers while no session is consuming.
	ErrNotConsuming = errors.New("not consuming from the broker")
	// ErrNotShared is returned by Control.Publish when the broker did not
	// confirm the decision (yet): it is kept and sent again.
	ErrNotShared = errors.New("decision not confirmed by the broker yet")
	// ErrReplicaNameTaken: another collector consumes this replica's control
	// queue; REPLICA_NAME must differ between replicas.
	ErrReplicaNameTaken = errors.New("another collector consumes this replica's control queue")
	// errSessionLost: the channel or connection closed under the session.
	errSessionLost = errors.New("broker session lost")
)
