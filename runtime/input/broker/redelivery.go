package broker

import amqp "github.com/rabbitmq/amqp091-go"

// firstDelivery reports whether the broker delivers d for the first time:
// neither the redelivered flag (set on a message requeued, by a nack or by a
// consumer whose channel closed holding it) nor, on a quorum queue, an
// x-delivery-count above 0. Only a first delivery may be mapped by a built-in
// module without termination checks (pipeline.Message.FirstDelivery): if the
// process dies on it, it comes back marked and is mapped guarded.
func firstDelivery(d amqp.Delivery) bool {
	if d.Redelivered {
		return false
	}
	return deliveryCount(d.Headers) == 0
}

// deliveryCount reads the x-delivery-count header of a quorum queue's
// delivery: how many times it was delivered before (0 when absent). A value
// of a type no broker sends counts as a redelivery, the safe side.
func deliveryCount(h amqp.Table) int64 {
	v, ok := h["x-delivery-count"]
	if !ok {
		return 0
	}
	switch n := v.(type) {
	case int64:
		return n
	case int32:
		return int64(n)
	case int16:
		return int64(n)
	case int8:
		return int64(n)
	case int:
		return int64(n)
	case uint8:
		return int64(n)
	case uint16:
		return int64(n)
	case uint32:
		return int64(n)
	}
	return 1
}
