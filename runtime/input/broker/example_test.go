package broker_test

import (
	"fmt"

	"github.com/tally-billing/tally-openstack-collector/runtime/input/broker"
)

// A dump line for an oslo envelope: the inner message with exchange and
// routing key first, credentials replaced at any depth and in any case.
func ExampleDumpLine() {
	body := []byte(`{"oslo.version": "2.0", "oslo.message": "{\"message_id\": \"m-1\", \"publisher_id\": \"volume.host1\", \"event_type\": \"volume.attach.end\", \"priority\": \"INFO\", \"payload\": {\"volume_id\": \"v-1\", \"connection_info\": {\"secret_uuid\": \"s\"}, \"attachments\": [{\"Auth_Password\": \"p\"}]}, \"timestamp\": \"2026-12-02 10:46:03.371529\", \"_context_auth_token\": \"t\", \"_context_project_id\": \"p-1\"}"}`)
	fmt.Print(string(broker.DumpLine(nil, "openstack", "notifications.info", body)))

	// Not JSON at all (here zlib data): the size alone.
	fmt.Print(string(broker.DumpLine(nil, "nova", "notifications.info", []byte{0x78, 0x9c, 0x95, 0x54})))
	// Output:
	// {"exchange":"openstack","routing_key":"notifications.info","message_id":"m-1","event_type":"volume.attach.end","timestamp":"2026-12-02 10:46:03.371529","publisher_id":"volume.host1","priority":"INFO","payload":{"volume_id":"v-1","connection_info":"[redacted]","attachments":[{"Auth_Password":"[redacted]"}]},"_context_auth_token":"[redacted]","_context_project_id":"p-1"}
	// {"exchange":"nova","routing_key":"notifications.info","size":4,"not_json":true}
}

// Options as cmd/ fills them from the settings; Run consumes until its
// context ends.
func ExampleNew() {
	opts := broker.Options{
		TransportURL: "rabbit://tally:secret@rabbit1:5672,tally:secret@rabbit2:5672/",
		Exchanges:    []string{"nova", "neutron", "openstack", "glance"},
		QueueType:    broker.QueueClassic,
	}
	_, err := broker.New(nil, nil, opts) // a Processor and an Outbox are required
	fmt.Println(err)
	// Output:
	// invalid broker options: processor and outbox are required
}
