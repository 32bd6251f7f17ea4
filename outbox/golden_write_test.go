package outbox_test

import (
	"fmt"
	"time"

	"github.com/tally-billing/tally-openstack-collector/outbox"
)

// The content of every golden store (testdata/format-v*), written by the
// build of its format and read back by TestGoldenStores:
//
//	events 1..4, 5..7 and 8..12 appended in three commits;
//	events 1..5 delivered (the cursor inside the second commit);
//	two dead letters;
//	events 13..14 appended;
//	the record "catalog" (formats that have records).
const (
	goldenEvents    = 14
	goldenDelivered = 5
	goldenRecord    = `{"golden":true}`
)

func goldenEvent(i int) []byte {
	return []byte(fmt.Sprintf(`{"event_id":"golden-%03d","timestamp":"2026-01-02T03:04:05.000000Z","event_type":"compute.instance.exists",`+
		`"service":"nova","resource_type":"instance","resource_id":"r-%03d","project_id":"p1","action":"exists",`+
		`"attributes":{"vcpus":2},"source":{"exchange":"nova","routing_key":"notifications.info"}}`, i, i))
}

func goldenDeadLetter(i int) outbox.DeadLetter {
	return outbox.DeadLetter{
		Body:       []byte(fmt.Sprintf(`{"event_type":"compute.instance.exists","payload":{"n":%d}}`, i)),
		Exchange:   "nova",
		RoutingKey: "notifications.info",
		EventType:  "compute.instance.exists",
		Module:     "nova",
		Reason:     "trap",
		Detail:     fmt.Sprintf("golden dead letter %d", i),
		At:         time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC),
	}
}
