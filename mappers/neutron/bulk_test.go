package main

import (
	"context"
	"encoding/json"
	"fmt"
	"strconv"
	"testing"
	"time"

	"github.com/tally-billing/tally-openstack-collector/internal/testkit"
	"github.com/tally-billing/tally-openstack-collector/runtime"
	"github.com/tally-billing/tally-openstack-collector/wasm-sdk/jsonindex"
)

// bulkLimit is the size the bulk notification below stays under: the body
// limit of the collector's inputs.
const bulkLimit = 1 << 20

// bulkPorts builds a valid port.create.end of just under 1 MiB whose payload
// holds 50,000 padding members before "ports", an array of 1,000 ports: a
// notification a publisher may send, shaped to make every lookup below
// payload expensive.
func bulkPorts(tb testing.TB) []byte {
	tb.Helper()
	const ports, padding = 1000, 50000
	b := []byte(`{"message_id":"b2b2b2b2-0000-4000-8000-00000000f001","publisher_id":"network.ctl-01",` +
		`"event_type":"port.create.end","priority":"INFO","timestamp":"2024-05-01 12:20:00.000000",` +
		`"_context_project_id":"3c6f1b2a9d8e4f70b1a2c3d4e5f6a7b8","payload":{`)
	for i := 0; i < padding; i++ {
		b = fmt.Appendf(b, `"pad%05d":%d,`, i, i%10)
	}
	b = append(b, `"ports":[`...)
	for i := 0; i < ports; i++ {
		if i > 0 {
			b = append(b, ',')
		}
		b = fmt.Appendf(b, `{"id":"%08d-0000-4000-8000-000000000000","name":"port-%d","status":"ACTIVE",`+
			`"network_id":"n1n1n1n1-0000-4000-8000-000000000001","project_id":"3c6f1b2a9d8e4f70b1a2c3d4e5f6a7b8",`+
			`"tenant_id":"3c6f1b2a9d8e4f70b1a2c3d4e5f6a7b8","device_owner":"compute:az-1","binding:vif_type":"ovs"}`, i, i)
	}
	b = append(b, `]`...)
	// Fill up to just under the limit with one more padding member.
	b = append(b, `,"fill":"`...)
	for len(b)+len(`"}}`) < bulkLimit-16 {
		b = append(b, 'x')
	}
	b = append(b, `"}}`...)
	if !json.Valid(b) || len(b) >= bulkLimit {
		tb.Fatalf("bulk notification: %d bytes, valid %v", len(b), json.Valid(b))
	}
	return b
}

// TestBulkNotificationMapsEveryPort maps the bulk notification above
// through the compiled module (make wasm), guarded, as a redelivery runs, on
// a new instance and with a deadline long enough for the race detector: all
// 1,000 ports become events, in order. The default deadline is the norace
// test's.
func TestBulkNotificationMapsEveryPort(t *testing.T) {
	ctx := context.Background()
	m := loadNeutron(t)
	var idx jsonindex.Index
	mapBulk(t, runtime.GuardedCall(ctx), m, &idx, 0)
}

// loadNeutron loads the compiled module (make wasm) with one instance and a
// call timeout of 30 s; a call's context may set a shorter deadline.
func loadNeutron(t *testing.T) *runtime.Module {
	t.Helper()
	wasm := testkit.BuiltModule(t, "mappers/dist/neutron.wasm")
	ctx := context.Background()
	eng, err := runtime.NewEngine(ctx, runtime.Config{CacheDir: testkit.CacheDir(t), Logger: testkit.Logger(),
		CallTimeout: 30 * time.Second, PoolSize: 1})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = eng.Close(ctx) })
	m, err := eng.Load(ctx, "builtin:neutron.wasm", wasm)
	if err != nil {
		t.Fatal(err)
	}
	return m
}

// mapBulk maps bulkPorts with m under ctx, indexed in idx, and checks the
// 1,000 events. A deadline d > 0 bounds the call from its start.
func mapBulk(t *testing.T, ctx context.Context, m *runtime.Module, idx *jsonindex.Index, d time.Duration) {
	t.Helper()
	in := bulkPorts(t)
	if err := idx.Parse(in); err != nil {
		t.Fatal(err)
	}
	if d > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, d)
		defer cancel()
	}
	start := time.Now()
	res, err := m.Map(ctx, idx, runtime.Source{Exchange: "neutron", RoutingKey: "notifications.info"})
	t.Logf("%d-byte notification mapped in %v", len(in), time.Since(start))
	if err != nil {
		t.Fatalf("%d-byte bulk notification: %v", len(in), err)
	}
	if len(res.Events) != 1000 || res.Oversize != 0 {
		t.Fatalf("%d events (%d oversize), want 1000", len(res.Events), res.Oversize)
	}
	for i, ev := range res.Events {
		var e struct {
			EventID    string `json:"event_id"`
			ResourceID string `json:"resource_id"`
		}
		if err := json.Unmarshal(ev, &e); err != nil {
			t.Fatalf("event %d: %v", i, err)
		}
		if want := fmt.Sprintf("%08d-0000-4000-8000-000000000000", i); e.ResourceID != want ||
			e.EventID != "b2b2b2b2-0000-4000-8000-00000000f001:"+strconv.Itoa(i) {
			t.Fatalf("event %d: resource_id %q event_id %q", i, e.ResourceID, e.EventID)
		}
	}
}
