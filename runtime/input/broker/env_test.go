package broker

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"
	"github.com/rs/zerolog"

	"github.com/tally-billing/tally-openstack-collector/outbox"
)

// The tests run against the real RabbitMQ on 127.0.0.1:5672 (guest/guest),
// each in a vhost of its own that it creates and deletes, so that it can
// declare and miss exchanges freely and share the broker with others.

const brokerAddr = "127.0.0.1:5672"

func requireBroker(t testing.TB) {
	t.Helper()
	c, err := net.DialTimeout("tcp", brokerAddr, 2*time.Second)
	if err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatalf("RabbitMQ is not reachable on %s: %v", brokerAddr, err)
		}
		t.Skipf("RabbitMQ is not reachable on %s (%v); these tests need it (CI=true makes this a failure)", brokerAddr, err)
	}
	c.Close()
	if _, err := exec.LookPath("rabbitmqctl"); err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatal("rabbitmqctl not found")
		}
		t.Skip("rabbitmqctl not found; these tests create vhosts with it")
	}
}

func rabbitmqctl(t testing.TB, args ...string) string {
	t.Helper()
	out, err := exec.Command("rabbitmqctl", args...).CombinedOutput()
	if err != nil {
		t.Fatalf("rabbitmqctl %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	return string(out)
}

type vhost struct {
	name string
	url  string
}

// The vhosts are made in one rabbitmqctl call for the whole package and
// removed in one at its end: each rabbitmqctl call costs about a second (more
// on a busy machine), which per-test calls would multiply.
const vhostPoolSize = 24

var vhostPool struct {
	sync.Mutex
	names []string
	next  int
	err   error
	made  bool

	narrowVhost string
}

func erlBinaries(names []string) string {
	q := make([]string, len(names))
	for i, n := range names {
		q[i] = `<<"` + n + `">>`
	}
	return "[" + strings.Join(q, ", ") + "]"
}

// The narrow account of docs/broker.md, made with the pool: its patterns are
// exactly the ones the document gives (for the exchanges nova and openstack).
const (
	narrowConfigure  = `^(tally-notifications|amq\.gen-.*)$`
	narrowWrite      = `^(tally-notifications|amq\.gen-.*)$`
	narrowRead       = `^(tally-notifications|amq\.gen-.*|nova|openstack)$`
	narrowTopicWrite = `^$`
	narrowTopicRead  = `^notifications\.(audit|debug|info|warn|error|critical|sample)$`
	narrowPassword   = "n4rrow-pw"
)

// narrowUser is the account on the pool's last vhost ("" when the pool was
// made without it).
var narrowUser string

func erlBin(s string) string {
	return `<<"` + strings.NewReplacer(`\`, `\\`, `"`, `\"`).Replace(s) + `">>`
}

func makeVhostPool() error {
	prefix := fmt.Sprintf("tally-broker-test-%d-%d-", os.Getpid(), time.Now().Unix()%100000)
	for i := 0; i < vhostPoolSize; i++ {
		vhostPool.names = append(vhostPool.names, fmt.Sprintf("%s%02d", prefix, i))
	}
	user := prefix + "narrow"
	last := vhostPool.names[len(vhostPool.names)-1]
	expr := `lists:foreach(fun(V) -> ok = rabbit_vhost:add(V, <<"tally-tests">>), ` +
		`ok = rabbit_auth_backend_internal:set_permissions(<<"guest">>, V, <<".*">>, <<".*">>, <<".*">>, <<"tally-tests">>) end, ` +
		erlBinaries(vhostPool.names) + `), ` +
		`ok = rabbit_auth_backend_internal:add_user(` + erlBin(user) + `, ` + erlBin(narrowPassword) + `, <<"tally-tests">>), ` +
		`ok = rabbit_auth_backend_internal:set_permissions(` + erlBin(user) + `, ` + erlBin(last) + `, ` +
		erlBin(narrowConfigure) + `, ` + erlBin(narrowWrite) + `, ` + erlBin(narrowRead) + `, <<"tally-tests">>), ` +
		`lists:foreach(fun(X) -> ok = rabbit_auth_backend_internal:set_topic_permissions(` + erlBin(user) + `, ` + erlBin(last) +
		`, X, ` + erlBin(narrowTopicWrite) + `, ` + erlBin(narrowTopicRead) + `, <<"tally-tests">>) end, [<<"nova">>, <<"openstack">>]), ok.`
	if out, err := exec.Command("rabbitmqctl", "eval", expr).CombinedOutput(); err == nil && strings.TrimSpace(string(out)) == "ok" {
		narrowUser = user
		vhostPool.names = vhostPool.names[:len(vhostPool.names)-1]
		vhostPool.narrowVhost = last
		return nil
	}
	// Fall back to the documented commands.
	for _, n := range vhostPool.names {
		if out, err := exec.Command("rabbitmqctl", "add_vhost", n).CombinedOutput(); err != nil {
			return fmt.Errorf("add_vhost: %v: %s", err, out)
		}
		if out, err := exec.Command("rabbitmqctl", "set_permissions", "-p", n, "guest", ".*", ".*", ".*").CombinedOutput(); err != nil {
			return fmt.Errorf("set_permissions: %v: %s", err, out)
		}
	}
	return nil
}

func dropVhostPool() {
	vhostPool.Lock()
	defer vhostPool.Unlock()
	if !vhostPool.made || vhostPool.err != nil {
		return
	}
	names := vhostPool.names
	userDel := ""
	if vhostPool.narrowVhost != "" {
		names = append(names, vhostPool.narrowVhost)
		userDel = `, rabbit_auth_backend_internal:delete_user(` + erlBin(narrowUser) + `, <<"tally-tests">>)`
	}
	expr := `lists:foreach(fun(V) -> rabbit_vhost:delete(V, <<"tally-tests">>) end, ` + erlBinaries(names) + `)` + userDel + `.`
	if exec.Command("rabbitmqctl", "eval", expr).Run() == nil {
		return
	}
	for _, n := range names {
		_ = exec.Command("rabbitmqctl", "delete_vhost", n).Run()
	}
}

// narrowVhost hands out the vhost where the narrow account is set up.
func narrowVhost(t testing.TB) *vhost {
	t.Helper()
	newVhost(t) // makes the pool
	vhostPool.Lock()
	defer vhostPool.Unlock()
	if vhostPool.narrowVhost == "" {
		t.Skip("the narrow account could not be made with rabbitmqctl eval")
	}
	return vhostByName(vhostPool.narrowVhost)
}

func TestMain(m *testing.M) {
	if os.Getenv(childEnv) != "" {
		os.Exit(childMain())
	}
	code := m.Run()
	dropVhostPool()
	os.Exit(code)
}

// newVhost hands the test a vhost of its own, guest allowed everything in it.
func newVhost(t testing.TB) *vhost {
	t.Helper()
	requireBroker(t)
	vhostPool.Lock()
	defer vhostPool.Unlock()
	if !vhostPool.made {
		vhostPool.made = true
		vhostPool.err = makeVhostPool()
	}
	if vhostPool.err != nil {
		t.Fatalf("creating test vhosts: %v", vhostPool.err)
	}
	if vhostPool.next >= len(vhostPool.names) {
		t.Fatal("vhost pool exhausted; raise vhostPoolSize")
	}
	name := vhostPool.names[vhostPool.next]
	vhostPool.next++
	return vhostByName(name)
}

func vhostByName(name string) *vhost {
	return &vhost{name: name, url: "amqp://guest:guest@" + brokerAddr + "/" + url.PathEscape(name)}
}

func (v *vhost) conn(t testing.TB) *amqp.Connection {
	t.Helper()
	c, err := amqp.Dial(v.url)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// declareExchanges declares topic exchanges as oslo does (not durable unless
// asked).
func (v *vhost) declareExchanges(t testing.TB, durable bool, names ...string) {
	t.Helper()
	c := v.conn(t)
	ch, err := c.Channel()
	if err != nil {
		t.Fatal(err)
	}
	defer ch.Close()
	for _, n := range names {
		if err := ch.ExchangeDeclare(n, amqp.ExchangeTopic, durable, false, false, false, nil); err != nil {
			t.Fatal(err)
		}
	}
}

// publish sends raw bodies with oslo's properties and waits for the broker's
// confirmation.
func (v *vhost) publish(t testing.TB, exchange, key string, bodies ...[]byte) {
	t.Helper()
	c := v.conn(t)
	defer c.Close()
	ch, err := c.Channel()
	if err != nil {
		t.Fatal(err)
	}
	if err := ch.Confirm(false); err != nil {
		t.Fatal(err)
	}
	for _, b := range bodies {
		dc, err := ch.PublishWithDeferredConfirm(exchange, key, false, false, amqp.Publishing{
			ContentType: "application/json", ContentEncoding: "utf-8", DeliveryMode: amqp.Persistent,
			Headers: amqp.Table{}, Body: b,
		})
		if err != nil {
			t.Fatal(err)
		}
		if !dc.Wait() {
			t.Fatal("publish not confirmed")
		}
	}
}

// queueState answers the number of ready messages and whether the queue exists.
func (v *vhost) queueState(t testing.TB, queue string) (ready int, exists bool) {
	t.Helper()
	c, err := amqp.Dial(v.url)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	ch, err := c.Channel()
	if err != nil {
		t.Fatal(err)
	}
	q, err := ch.QueueDeclarePassive(queue, false, false, false, false, nil)
	var ae *amqp.Error
	if errors.As(err, &ae) && ae.Code == amqp.NotFound {
		return 0, false
	}
	if err != nil {
		t.Fatal(err)
	}
	return q.Messages, true
}

// queueCounts answers the unacknowledged deliveries and the consumers of a
// queue, as the broker reports them.
func (v *vhost) queueCounts(t testing.TB, queue string) (unacked, consumers int, ok bool) {
	t.Helper()
	out := rabbitmqctl(t, "list_queues", "-q", "--no-table-headers", "-p", v.name,
		"name", "messages_unacknowledged", "consumers")
	for _, line := range strings.Split(out, "\n") {
		f := strings.Fields(line)
		if len(f) == 3 && f[0] == queue {
			u, err1 := strconv.Atoi(f[1])
			c, err2 := strconv.Atoi(f[2])
			return u, c, err1 == nil && err2 == nil
		}
	}
	return 0, 0, false
}

// queuedIDs reads the message_ids of every message ready in the queue
// without removing any: they are fetched unacknowledged and go back to the
// queue when the channel closes.
func (v *vhost) queuedIDs(t testing.TB, queue string) map[string]bool {
	t.Helper()
	c, err := amqp.Dial(v.url)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	ch, err := c.Channel()
	if err != nil {
		t.Fatal(err)
	}
	ids := map[string]bool{}
	for {
		m, ok, err := ch.Get(queue, false)
		if err != nil {
			t.Fatal(err)
		}
		if !ok {
			break
		}
		ids[messageID(t, m.Body)] = true
	}
	if err := ch.Close(); err != nil {
		t.Fatal(err)
	}
	return ids
}

// bindings lists "exchange routing_key" of every binding to queue.
func (v *vhost) bindings(t testing.TB, queue string) []string {
	t.Helper()
	out := rabbitmqctl(t, "list_bindings", "-q", "--no-table-headers", "-p", v.name,
		"source_name", "destination_name", "routing_key")
	var res []string
	for _, line := range strings.Split(out, "\n") {
		f := strings.Split(line, "\t")
		if len(f) == 3 && f[1] == queue && f[0] != "" {
			res = append(res, f[0]+" "+f[2])
		}
	}
	return res
}

// osloNotify publishes notification files with the real oslo.messaging
// Notifier (examples/publisher/oslo_notify.py), or with the Go publisher that
// writes the same bytes where oslo is not installed. It returns the
// message_ids used.
func (v *vhost) osloNotify(t testing.TB, exchange string, count int, files ...string) []string {
	t.Helper()
	args := []string{"--url", "rabbit://guest:guest@" + brokerAddr + "/" + url.PathEscape(v.name),
		"--exchange", exchange, "--publisher-id", "test.host1", "--count", fmt.Sprint(count)}
	for _, f := range files {
		args = append(args, filepath.Join("testdata", "notifications", f))
	}
	var cmd *exec.Cmd
	if exec.Command("/usr/bin/python3", "-c", "import oslo_messaging").Run() == nil {
		cmd = exec.Command("/usr/bin/python3", append([]string{"../../../examples/publisher/oslo_notify.py"}, args...)...)
	} else {
		t.Log("python3-oslo.messaging not available; publishing with examples/publisher")
		cmd = exec.Command("go", append([]string{"run", "../../../examples/publisher"}, args...)...)
	}
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("publish: %v\n%s", err, stderr.String())
	}
	var ids []string
	sc := bufio.NewScanner(bytes.NewReader(out))
	for sc.Scan() {
		var r struct {
			MessageID string `json:"message_id"`
		}
		if err := json.Unmarshal(sc.Bytes(), &r); err != nil || r.MessageID == "" {
			t.Fatalf("publisher said %q", sc.Text())
		}
		ids = append(ids, r.MessageID)
	}
	if len(ids) != count*len(files) {
		t.Fatalf("published %d, want %d", len(ids), count*len(files))
	}
	return ids
}

// syncBuf collects log lines for assertions.
type syncBuf struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *syncBuf) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *syncBuf) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// testOptions are fast schedules for tests: classic queue (the broker here is
// 3.10), short backoffs.
func testOptions(v *vhost, logs *syncBuf, exchanges ...string) Options {
	return Options{
		TransportURL: v.url,
		Exchanges:    exchanges,
		QueueType:    QueueClassic,
		Prefetch:     20,
		ReconnectMin: 100 * time.Millisecond,
		ReconnectMax: 400 * time.Millisecond,
		ProbeMin:     200 * time.Millisecond,
		ProbeMax:     400 * time.Millisecond,
		PauseMin:     200 * time.Millisecond,
		PauseMax:     400 * time.Millisecond,
		RefusedRetry: time.Second,
		Logger:       zerolog.New(logs).Level(zerolog.DebugLevel),
	}
}

type runningConsumer struct {
	*Consumer
	cancel context.CancelFunc
	done   chan error
}

func startConsumer(t testing.TB, c *Consumer) *runningConsumer {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	r := &runningConsumer{Consumer: c, cancel: cancel, done: make(chan error, 1)}
	go func() { r.done <- c.Run(ctx) }()
	t.Cleanup(r.stop)
	return r
}

func (r *runningConsumer) stop() {
	r.cancel()
	select {
	case <-r.done:
	case <-time.After(15 * time.Second):
		panic("consumer did not stop")
	}
	r.done <- nil // later stops return at once
}

func openOutbox(t testing.TB, dir string, maxEvents int64) *outbox.Outbox {
	t.Helper()
	ob, err := outbox.Open(outbox.Options{Dir: dir, MaxEvents: maxEvents, MinFreeBytes: -1, Logger: zerolog.Nop()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ob.Close() })
	return ob
}

// outboxIDs counts the event_ids in the outbox.
func outboxIDs(t testing.TB, ob *outbox.Outbox) map[string]int {
	t.Helper()
	_, _, events, err := ob.Peek(context.Background(), 1<<20)
	if err != nil {
		t.Fatal(err)
	}
	ids := map[string]int{}
	for _, e := range events {
		var ev struct {
			EventID string `json:"event_id"`
		}
		if err := json.Unmarshal(e, &ev); err != nil {
			t.Fatalf("event %s: %v", e, err)
		}
		ids[ev.EventID]++
	}
	return ids
}

func waitFor(t testing.TB, d time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(d)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %s waiting for %s", d, what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// messageID reads the oslo message_id of a body (envelope or bare).
func messageID(t testing.TB, body []byte) string {
	t.Helper()
	var outer map[string]any
	if err := json.Unmarshal(body, &outer); err != nil {
		t.Fatal(err)
	}
	if s, ok := outer["oslo.message"].(string); ok {
		outer = nil
		if err := json.Unmarshal([]byte(s), &outer); err != nil {
			t.Fatal(err)
		}
	}
	id, _ := outer["message_id"].(string)
	if id == "" {
		t.Fatal("body has no message_id")
	}
	return id
}

// note builds an oslo envelope for a notification of the given type.
func note(t testing.TB, id, eventType string) []byte {
	t.Helper()
	inner, _ := json.Marshal(map[string]any{
		"message_id": id, "publisher_id": "test.host1", "event_type": eventType, "priority": "INFO",
		"payload": map[string]any{"n": 1}, "timestamp": "2026-12-02 10:46:03.371529",
	})
	return envelope(t, inner)
}

func openChildOutbox(dir string) (*outbox.Outbox, error) {
	return openChildOutboxWithReserve(dir, -1)
}

// openChildOutboxWithReserve opens an outbox that keeps reserve bytes free: a
// reserve larger than the disk makes every insert refused (ErrRefused), as a
// full disk does.
func openChildOutboxWithReserve(dir string, reserve int64) (*outbox.Outbox, error) {
	return outbox.Open(outbox.Options{Dir: dir, MaxEvents: 1000, MinFreeBytes: reserve, Logger: zerolog.Nop()})
}

func eventID(t testing.TB, ev []byte) string {
	t.Helper()
	var e struct {
		EventID string `json:"event_id"`
	}
	if err := json.Unmarshal(ev, &e); err != nil {
		t.Fatalf("event %s: %v", ev, err)
	}
	return e.EventID
}

// classicQueueVhost is a fresh virtual host with the nova exchange and the
// collector's queue declared classic (as the consumer declares it with
// QueueClassic), and a channel on it for publishing.
func classicQueueVhost(t testing.TB) (*vhost, *amqp.Channel) {
	t.Helper()
	v := newVhost(t)
	v.declareExchanges(t, false, "nova")
	ch, err := v.conn(t).Channel()
	if err != nil {
		t.Fatal(err)
	}
	if _, err := ch.QueueDeclare(DefaultQueue, true, false, false, false, queueArgs(QueueClassic)); err != nil {
		t.Fatal(err)
	}
	return v, ch
}
