package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	goruntime "runtime"
	"strings"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/tally-billing/tally-openstack-collector/internal/testkit"
	"github.com/tally-billing/tally-openstack-collector/runtime/pipeline"
)

// hostileBody is one message a hostile or broken publisher sends: a body
// and the kombu "compression" header it comes with (empty: none), and the
// exchange it goes to when not the one publishBodies is given.
type hostileBody struct {
	body        []byte
	compression string
	exchange    string
}

// publishBodies publishes bodies to exchange (or each to its own) with
// routing key notifications.info, persistent, confirmed.
func publishBodies(t *testing.T, v *vhost, exchange string, bodies []hostileBody) {
	t.Helper()
	ch, err := v.Conn(t).Channel()
	if err != nil {
		t.Fatal(err)
	}
	defer ch.Close()
	if err := ch.Confirm(false); err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	var pending []*amqp.DeferredConfirmation
	for _, b := range bodies {
		p := amqp.Publishing{ContentType: "application/json", DeliveryMode: amqp.Persistent, Body: b.body}
		if b.compression != "" {
			p.Headers = amqp.Table{"compression": b.compression}
		}
		x := exchange
		if b.exchange != "" {
			x = b.exchange
		}
		d, err := ch.PublishWithDeferredConfirmWithContext(ctx, x, "notifications.info", false, false, p)
		if err != nil {
			t.Fatal(err)
		}
		pending = append(pending, d)
	}
	for _, d := range pending {
		if ok, err := d.WaitContext(ctx); !ok || err != nil {
			t.Fatalf("publish not confirmed: %v", err)
		}
	}
}

// bombPayload is what the bombs inflate to: a notification no module
// claims, so that a bomb that did get through would cost memory and
// nothing else.
var bombPayload = []byte(`{"event_type":"hostile.bomb","payload":{}}`)

// decoderBombs are the four header bombs: an .xz stream whose LZMA2 filter
// announces a 4 GiB dictionary (128 bytes), an .lzma stream announcing the
// same (86 bytes), a zstd frame announcing a 4 GiB single segment, a brotli
// stream asking for a large window.
func decoderBombs(t *testing.T) []hostileBody {
	return []hostileBody{
		{body: testkit.XZDictBomb(t, bombPayload, 40), compression: pipeline.CodecLZMA},
		{body: testkit.LZMADictBomb(t, bombPayload, 0xffffffff), compression: pipeline.CodecLZMA},
		{body: testkit.ZstdSegmentBomb(bombPayload), compression: pipeline.CodecZstd},
		{body: testkit.BrotliLargeWindow(), compression: pipeline.CodecBrotli},
	}
}

// budgetInputs is what the resident-memory budget depends on besides the
// modules compiled: the largest body the broker delivers (zero: notifications
// of a few KiB, 16 KiB counted), whether the notifications may grow the
// modules' instances to their memory limit (large or deep ones do; kilobyte
// ones leave them at about 2.4 MiB, 4 MiB counted), and the inputs besides
// the broker that are on, each counted at its bound: plog listeners (none by
// default) and the uids connected to the local channel (off by default).
type budgetInputs struct {
	largestBody      int64
	instancesAtLimit bool
	plogListeners    int
	channelUIDs      int
}

// residentBudget is the peak resident memory docs/operations.md ("The
// resident-memory budget") allows a collector with the defaults on this
// host (one mapping worker and one instance per module per CPU) with
// compiled built-in modules in memory. Each constant is a row of that
// table.
func residentBudget(compiled int, in budgetInputs) int64 {
	const (
		base          = 64 << 20 // the process at rest, outbox open
		module        = 20 << 20 // a compiled built-in module's code
		instance      = 4 << 20  // an instance's linear memory after mapping kilobyte notifications
		instanceLimit = 64 << 20 // MAPPER_MEMORY_LIMIT_MIB
		badger        = 28 << 20 // the outbox's memory tables and caches
		decoderState  = 17 << 20 // brotli's, the largest (docs/broker.md, section 4)
		output        = 4 * (pipeline.DefaultMaxBodyBytes + 1)
		prefetch      = 100              // PREFETCH deliveries held
		smallBody     = 16 << 10         // a notification of a few KiB, counted
		rest          = 32 << 20         // batches, metrics, the collector's heap headroom
		http          = 256 * (20 << 10) // HTTP_MAX_CONNECTIONS × about 20 KiB
		ledger        = 8 << 20          // the ledger's rows of a batch and of a read (TestEndToEndHostilePublisherSuite)
		// A plog listener: its TCP line budget (32 MiB), 64 KiB of read
		// buffer for each of its 256 connections, its UDP defragmenter (1 MiB).
		plogListener = 32<<20 + 256*(64<<10) + 1<<20
		channelUID   = 16 * (64<<10 + 1052672) // CHANNEL_MAX_CONNECTIONS_PER_UID × (read buffer + largest frame)
		channelMsgs  = 32 << 20                // messages read and not yet answered, all connections
	)
	cpus := int64(goruntime.GOMAXPROCS(0))
	inst := int64(instance)
	if in.instancesAtLimit {
		inst = instanceLimit
	}
	b := base + int64(compiled)*(module+cpus*inst) + badger + cpus*(decoderState+output) +
		prefetch*max(smallBody, in.largestBody) + rest + http + ledger
	b += int64(in.plogListeners) * plogListener
	if in.channelUIDs > 0 {
		b += int64(min(in.channelUIDs, 16))*channelUID + channelMsgs
	}
	return b
}

// A publisher that sends decoder bombs among ordinary notifications costs
// the collector nothing it cannot afford: twenty bodies of under 130 bytes
// whose headers ask for gigabytes of decoder state are refused from their
// headers (reason decoder_limit, counted), the collector's peak resident
// set stays within the documented budget, and every ordinary notification
// reaches the Reporting API exactly once.
func TestEndToEndDecoderBombsAmongOrdinaryNotifications(t *testing.T) {
	e := setupE2E(t)
	bombs := decoderBombs(t)
	exchange := e.corpus.exchanges()[0]
	const rounds, perRound, bombsPerRound = 10, 20, 2
	for r := range rounds {
		publishRaw(t, e.v, e.corpus, e.prefix, r*perRound, (r+1)*perRound)
		var these []hostileBody
		for i := range bombsPerRound {
			these = append(these, bombs[(r*bombsPerRound+i)%len(bombs)])
		}
		publishBodies(t, e.v, exchange, these)
	}
	const n = rounds * perRound
	e.waitDelivered(t, n, 3*time.Minute)
	e.checkExactSet(t, n)
	// At least: a delivery the broker gives again (after a lost connection)
	// is counted again.
	testkit.WaitFor(t, 60*time.Second, "every bomb refused", func() bool {
		return sum(e.c.metrics(t), "tally_collector_acked_total") >= n+rounds*bombsPerRound
	})
	m := e.c.metrics(t)
	if got := sum(m, "tally_collector_unparseable_total", `reason="decoder_limit"`); got < rounds*bombsPerRound {
		t.Errorf(`unparseable_total{reason="decoder_limit"} = %v, want %d`, got, rounds*bombsPerRound)
	}
	compiled := int(sum(m, "tally_collector_mapper_builtins_compiled"))
	budget := residentBudget(compiled, budgetInputs{})
	hwm := int64(procStatus(t, e.c.p.cmd.Process.Pid, "VmHWM")) << 10
	t.Logf("collector peak resident set (VmHWM) after %d bombs among %d notifications: %d MiB (budget %d MiB, %d modules compiled)",
		rounds*bombsPerRound, n, hwm>>20, budget>>20, compiled)
	if hwm > budget {
		t.Errorf("peak resident set %d MiB, over the documented budget of %d MiB", hwm>>20, budget>>20)
	}
	// The bombs are consumed and settled as dead letters beside the
	// ordinary notifications' events: every hour balances.
	tot, _ := e.c.checkLedger(t)
	if tot.Consumed < n+rounds*bombsPerRound || tot.DeadTotal() < rounds*bombsPerRound || tot.Delivered < n {
		t.Errorf("ledger totals %+v, want at least %d consumed, %d dead-lettered, %d delivered", tot, n+rounds*bombsPerRound, rounds*bombsPerRound, n)
	}
	if code, _ := e.c.p.stop(t, 40*time.Second); code != 0 {
		t.Errorf("stop: exit %d", code)
	}
}

// undeliverableFlood is n bodies no replay could deliver, of every kind:
// not JSON, a compression header that lies, a decoder bomb, and a few over
// the 1 MiB body limit.
func undeliverableFlood(t *testing.T, n int) []hostileBody {
	bombs := decoderBombs(t)
	huge := bytes.Repeat([]byte("x"), pipeline.DefaultMaxBodyBytes+1024)
	out := make([]hostileBody, 0, n)
	for i := range n {
		switch {
		case i%200 == 199:
			out = append(out, hostileBody{body: huge})
		case i%3 == 0:
			out = append(out, hostileBody{body: []byte(fmt.Sprintf("not json %d", i))})
		case i%3 == 1:
			out = append(out, hostileBody{body: []byte(fmt.Sprintf(`{"n":%d}`, i)), compression: pipeline.CodecGzip})
		default:
			out = append(out, bombs[i%len(bombs)])
		}
	}
	return out
}

// Bodies no replay can deliver never pause the input: 2,000 of them
// (undecodable, badly compressed, decoder bombs, oversized) flood in among
// 200 ordinary notifications, with the dead-letter bound at 100. Every one
// is acknowledged; at most the undeliverable budget is kept, the rest
// counted as dropped; consumption is never paused (the pause counter, the
// refusals and the requeues stay at zero) and every ordinary notification
// reaches the Reporting API exactly once.
func TestEndToEndUndeliverableFloodNeverPauses(t *testing.T) {
	e := setupE2E(t, "TALLY_OSC_DEADLETTER_MAX_EVENTS=100", "TALLY_OSC_DEADLETTER_UNDELIVERABLE_MAX_EVENTS=500")
	exchange := e.corpus.exchanges()[0]
	const rounds, perRound, flood = 10, 20, 2000
	bad := undeliverableFlood(t, flood)
	for r := range rounds {
		publishRaw(t, e.v, e.corpus, e.prefix, r*perRound, (r+1)*perRound)
		publishBodies(t, e.v, exchange, bad[r*flood/rounds:(r+1)*flood/rounds])
	}
	const n = rounds * perRound
	e.waitDelivered(t, n, 5*time.Minute)
	e.checkExactSet(t, n)
	// At least: a delivery the broker gives again (after a lost connection)
	// is counted again.
	testkit.WaitFor(t, 2*time.Minute, "every delivery acknowledged", func() bool {
		return sum(e.c.metrics(t), "tally_collector_acked_total") >= n+flood
	})
	m := e.c.metrics(t)
	unparseable := sum(m, "tally_collector_unparseable_total")
	if unparseable < flood {
		t.Errorf("unparseable_total = %v, want %d", unparseable, flood)
	}
	for _, c := range []struct {
		name string
		want float64
	}{
		{"tally_collector_consumer_pauses_total", 0},
		{"tally_collector_consumer_paused", 0},
		{"tally_collector_deadletter_refused_total", 0},
		{"tally_collector_deadletter_full", 0},
		{"tally_collector_nacked_total", 0},
		{"tally_collector_deadletter_undeliverable", 500},
		{"tally_collector_deadletters", 500},
		{"tally_collector_deadletter_undeliverable_dropped_total", unparseable - 500},
	} {
		if got := sum(m, c.name); got != c.want {
			t.Errorf("%s = %v, want %v", c.name, got, c.want)
		}
	}
	if out := e.c.p.out.String(); strings.Contains(out, "consumption paused") {
		t.Errorf("the collector paused consumption:\n%s", tail(out, 3000))
	}
	if !strings.Contains(e.c.p.out.String(), "undeliverable body over its dead-letter budget") {
		t.Error("the dropped bodies are not logged")
	}
	if code, _, err := e.c.get("/readyz"); err != nil || code != 200 {
		t.Errorf("readyz after the flood: %d %v", code, err)
	}
	// Kept or dropped, every undeliverable body is settled in the ledger.
	tot, _ := e.c.checkLedger(t)
	if tot.Consumed < n+flood || tot.DeadTotal()+tot.SkippedTotal() < flood || tot.Delivered < n {
		t.Errorf("ledger totals %+v, want at least %d consumed, %d dead-lettered or skipped, %d delivered", tot, n+flood, flood, n)
	}
	if code, _ := e.c.p.stop(t, 40*time.Second); code != 0 {
		t.Errorf("stop: exit %d", code)
	}
}

// Forty notifications no module claims, each with a distinct event type of
// nearly 1 MiB of '<', among 100 ordinary ones: every one is acknowledged
// and counted, and the ledger balances. Their intake rows are keyed by the
// types folded to a prefix and a hash, so the counts of a commit stay small;
// before, a commit's counts were hundreds of MiB, the store refused the
// commit, and the batch came back for ever.
func TestEndToEndLongEventTypesAreCounted(t *testing.T) {
	e := setupE2E(t)
	exchange := e.corpus.exchanges()[0]
	const n, long = 100, 40
	bodies := make([]hostileBody, long)
	for i := range bodies {
		typ := fmt.Sprintf("hostile.%02d.", i) + strings.Repeat("<", pipeline.DefaultMaxBodyBytes-256)
		bodies[i] = hostileBody{body: []byte(`{"event_type":"` + typ + `","payload":{}}`)}
	}
	publishRaw(t, e.v, e.corpus, e.prefix, 0, n/2)
	publishBodies(t, e.v, exchange, bodies)
	publishRaw(t, e.v, e.corpus, e.prefix, n/2, n)
	e.waitDelivered(t, n, 3*time.Minute)
	e.checkExactSet(t, n)
	testkit.WaitFor(t, 2*time.Minute, "every delivery acknowledged", func() bool {
		return sum(e.c.metrics(t), "tally_collector_acked_total") >= n+long
	})
	if got := sum(e.c.metrics(t), "tally_collector_outbox_refused_total"); got != 0 {
		t.Errorf("outbox_refused_total = %v, want 0", got)
	}
	tot, table := e.c.checkLedger(t)
	if tot.Consumed < n+long || tot.Skipped[pipeline.ReasonUnclaimed] < long || tot.Delivered < n {
		t.Errorf("ledger totals %+v, want at least %d consumed, %d unclaimed, %d delivered", tot, n+long, long, n)
	}
	if len(table) > 64<<10 {
		t.Errorf("the ledger's table takes %d bytes", len(table))
	}
	checkWithinBudget(t, e, budgetInputs{largestBody: pipeline.DefaultMaxBodyBytes})
	if code, _ := e.c.p.stop(t, 40*time.Second); code != 0 {
		t.Errorf("stop: exit %d", code)
	}
}

// checkWithinBudget fails t when the collector's peak resident set is over
// the documented budget for the modules it compiled and in.
func checkWithinBudget(t *testing.T, e *e2e, in budgetInputs) {
	t.Helper()
	compiled := int(sum(e.c.metrics(t), "tally_collector_mapper_builtins_compiled"))
	budget := residentBudget(compiled, in)
	hwm := int64(procStatus(t, e.c.p.cmd.Process.Pid, "VmHWM")) << 10
	t.Logf("collector peak resident set (VmHWM): %d MiB (budget %d MiB, %d modules compiled)", hwm>>20, budget>>20, compiled)
	if hwm > budget {
		t.Errorf("peak resident set %d MiB, over the documented budget of %d MiB", hwm>>20, budget>>20)
	}
}

// A valid notification of just under the 1 MiB body limit whose every
// lookup used to walk a large object again (neutron's port.create.end with
// 1,000 ports beside 50,000 padding members of the payload) costs one
// mapping and no restart: five of them among ordinary notifications are
// each mapped into their 1,000 events, the collector never exits, every
// ordinary notification arrives, the ledger balances and the peak stays
// within the budget. Before the per-object member index, each of the five
// took the call past its deadline and the process exited with status 70.
func TestEndToEndBulkNotificationsCostNoRestart(t *testing.T) {
	e := setupE2E(t)
	const n, bulk, ports = 100, 5, 1000
	bodies := make([]hostileBody, bulk)
	for i := range bodies {
		bodies[i] = hostileBody{body: bulkPorts(t, fmt.Sprintf("%s-bulk-%d", e.prefix, i), ports), exchange: "neutron"}
	}
	publishRaw(t, e.v, e.corpus, e.prefix, 0, n/2)
	publishBodies(t, e.v, "", bodies)
	publishRaw(t, e.v, e.corpus, e.prefix, n/2, n)
	testkit.WaitUntil(t, 3*time.Minute, "the ordinary notifications and every port at the Reporting API", func() (bool, string) {
		if !e.c.p.running() {
			t.Fatalf("the collector exited: %v", e.c.p.err)
		}
		events, _ := e.api.events(t)
		got := 0
		for _, ev := range events {
			if ev.EventType == "port.create.end" && strings.Contains(ev.EventID, e.prefix+"-bulk-") {
				got++
			}
		}
		return got >= bulk*ports && len(events) >= n+bulk*ports, fmt.Sprintf("%d of %d ports, %d events", got, bulk*ports, len(events))
	})
	if e.c.runs != 1 {
		t.Errorf("the collector ran %d times, want once", e.c.runs)
	}
	e.checkQueueEmpty(t)
	m := e.c.metrics(t)
	if got := sum(m, "tally_collector_acked_total"); got < n+bulk {
		t.Errorf("acked_total = %v, want at least %d", got, n+bulk)
	}
	if got := sum(m, "tally_collector_mapper_failures_total"); got != 0 {
		t.Errorf("mapper_failures_total = %v, want 0", got)
	}
	tot := e.c.checkLedgerBalanced(t)
	if tot.Delivered < n+bulk*ports {
		t.Errorf("ledger totals %+v, want at least %d delivered", tot, n+bulk*ports)
	}
	checkWithinBudget(t, e, budgetInputs{largestBody: pipeline.DefaultMaxBodyBytes, instancesAtLimit: true})
	if code, _ := e.c.p.stop(t, 40*time.Second); code != 0 {
		t.Errorf("stop: exit %d", code)
	}
}

// bulkPorts is neutron's port.create.end of id with ports ports and 50,000
// padding members in its payload, filled up to just under the body limit
// (the shape of mappers/neutron's bulk test).
func bulkPorts(t *testing.T, id string, ports int) []byte {
	t.Helper()
	const padding = 50000
	b := []byte(`{"message_id":"` + id + `","publisher_id":"network.ctl-01",` +
		`"event_type":"port.create.end","priority":"INFO","timestamp":"2024-05-01 12:20:00.000000",` +
		`"_context_project_id":"3c6f1b2a9d8e4f70b1a2c3d4e5f6a7b8","payload":{`)
	for i := range padding {
		b = fmt.Appendf(b, `"pad%05d":%d,`, i, i%10)
	}
	b = append(b, `"ports":[`...)
	for i := range ports {
		if i > 0 {
			b = append(b, ',')
		}
		b = fmt.Appendf(b, `{"id":"%s-port-%04d","name":"port-%d","status":"ACTIVE",`+
			`"network_id":"n1n1n1n1-0000-4000-8000-000000000001","project_id":"3c6f1b2a9d8e4f70b1a2c3d4e5f6a7b8",`+
			`"tenant_id":"3c6f1b2a9d8e4f70b1a2c3d4e5f6a7b8","device_owner":"compute:az-1","binding:vif_type":"ovs"}`, id, i, i)
	}
	b = append(b, `],"fill":"`...)
	for len(b)+len(`"}}`) < pipeline.DefaultMaxBodyBytes-16 {
		b = append(b, 'x')
	}
	b = append(b, `"}}`...)
	if !json.Valid(b) {
		t.Fatalf("bulk notification %s is not JSON", id)
	}
	return b
}
