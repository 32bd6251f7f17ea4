package e2e

// End-to-end tests on the three-node RabbitMQ 4 cluster of
// .ci/rabbitmq4-cluster (docs/broker.md, "A RabbitMQ 4 cluster for tests"):
// the shipped default, a quorum queue declared with x-delivery-limit -1,
// under the faults a production cluster sees. The built binary, the
// reference Reporting API and the real oslo.messaging Notifier, as in
// e2e_test.go. The cluster is shared with other packages' tests: each test
// has a virtual host of its own there and deletes it. A missing cluster
// fails the test.

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/tally-billing/tally-openstack-collector/internal/testkit"
)

// clusterVhost is a virtual host of one test on the RabbitMQ 4 cluster.
type clusterVhost struct {
	name  string
	hosts []string     // host:port of nodes 1, 2 and 3
	down  map[int]bool // nodes the test has stopped
}

func newClusterVhost(tb testing.TB) *clusterVhost {
	tb.Helper()
	urls := testkit.RabbitMQ4Cluster(tb)
	v := &clusterVhost{name: "tally-c4-" + randHex(4), down: map[int]bool{}}
	for _, u := range urls {
		pu, err := url.Parse(u)
		if err != nil {
			tb.Fatalf("cluster URL %q: %v", u, err)
		}
		v.hosts = append(v.hosts, pu.Host)
	}
	v.ctl(tb, "add_vhost", v.name)
	tb.Cleanup(func() {
		// Runs after the nodes the test stopped were started again (their
		// cleanups were registered later).
		if _, err := v.ctlErr(tb, "delete_vhost", v.name); err != nil {
			tb.Errorf("deleting vhost %s: %v", v.name, err)
		}
	})
	v.ctl(tb, "set_permissions", "-p", v.name, "guest", ".*", ".*", ".*")
	return v
}

// ctlErr runs rabbitmqctl on the first node that answers, the nodes the test
// stopped last.
func (v *clusterVhost) ctlErr(tb testing.TB, args ...string) (string, error) {
	tb.Helper()
	order := []int{}
	for n := 1; n <= 3; n++ {
		if !v.down[n] {
			order = append(order, n)
		}
	}
	for n := 1; n <= 3; n++ {
		if v.down[n] {
			order = append(order, n)
		}
	}
	var errs []error
	for _, n := range order {
		out, err := testkit.RabbitMQ4CtlErr(tb, n, args...)
		if err == nil {
			return out, nil
		}
		errs = append(errs, err)
	}
	return "", errors.Join(errs...)
}

func (v *clusterVhost) ctl(tb testing.TB, args ...string) string {
	tb.Helper()
	out, err := v.ctlErr(tb, args...)
	if err != nil {
		tb.Fatalf("rabbitmqctl %s: %v", strings.Join(args, " "), err)
	}
	return out
}

// transportURL lists the three nodes, as a deployment's transport_url does.
func (v *clusterVhost) transportURL() string {
	var hs []string
	for _, h := range v.hosts {
		hs = append(hs, "guest:guest@"+h)
	}
	return "rabbit://" + strings.Join(hs, ",") + "/" + v.name
}

func (v *clusterVhost) nodeURL(node int) string {
	return "amqp://guest:guest@" + v.hosts[node-1] + "/" + v.name
}

// nodeOf answers the node (1, 2 or 3) listening on host:port, or 0.
func (v *clusterVhost) nodeOf(hostport string) int {
	for i, h := range v.hosts {
		if h == hostport {
			return i + 1
		}
	}
	return 0
}

// dial connects to the first live node.
func (v *clusterVhost) dial(tb testing.TB) *amqp.Connection {
	tb.Helper()
	var errs []error
	for n := 1; n <= 3; n++ {
		if v.down[n] {
			continue
		}
		c, err := amqp.DialConfig(v.nodeURL(n), amqp.Config{Vhost: v.name, Properties: amqp.Table{"connection_name": "tally-cluster-test"}})
		if err == nil {
			tb.Cleanup(func() { c.Close() })
			return c
		}
		errs = append(errs, err)
	}
	tb.Fatalf("dial the cluster: %v", errors.Join(errs...))
	return nil
}

// declareExchanges declares the service exchanges as oslo does (topic, not
// durable), as a cloud's services would have.
func (v *clusterVhost) declareExchanges(tb testing.TB, names ...string) {
	tb.Helper()
	ch, err := v.dial(tb).Channel()
	if err != nil {
		tb.Fatal(err)
	}
	defer ch.Close()
	for _, n := range names {
		if err := ch.ExchangeDeclare(n, "topic", false, false, false, false, nil); err != nil {
			tb.Fatalf("declare %s: %v", n, err)
		}
	}
}

// clusterQueue is a queue as rabbitmqctl list_queues reports it.
type clusterQueue struct {
	Name                      string          `json:"name"`
	Type                      string          `json:"type"`
	Arguments                 [][]any         `json:"arguments"`
	Leader                    string          `json:"leader"`
	Members                   []string        `json:"members"`
	Messages                  int             `json:"messages"`
	MessagesUnacknowledged    int             `json:"messages_unacknowledged"`
	Consumers                 int             `json:"consumers"`
	Policy                    string          `json:"policy"`
	EffectivePolicyDefinition json.RawMessage `json:"effective_policy_definition"`
}

// argument answers the value of a declare argument ([name, type, value]).
func (q clusterQueue) argument(name string) (any, bool) {
	for _, a := range q.Arguments {
		if len(a) == 3 && a[0] == name {
			return a[2], true
		}
	}
	return nil, false
}

// leaderNode is the node number of the queue's leader, or 0.
func (q clusterQueue) leaderNode() int {
	var n int
	if _, err := fmt.Sscanf(q.Leader, "rabbit%d@", &n); err != nil {
		return 0
	}
	return n
}

// queues lists the queues of the virtual host by name.
func (v *clusterVhost) queues(tb testing.TB) map[string]clusterQueue {
	tb.Helper()
	out := v.ctl(tb, "list_queues", "-p", v.name, "--formatter", "json", "name", "type", "arguments", "leader",
		"members", "messages", "messages_unacknowledged", "consumers", "policy", "effective_policy_definition")
	var qs []clusterQueue
	if err := json.Unmarshal([]byte(out), &qs); err != nil {
		tb.Fatalf("list_queues: %v\n%s", err, out)
	}
	m := make(map[string]clusterQueue, len(qs))
	for _, q := range qs {
		m[q.Name] = q
	}
	return m
}

func (v *clusterVhost) queue(tb testing.TB, name string) (clusterQueue, bool) {
	tb.Helper()
	q, ok := v.queues(tb)[name]
	return q, ok
}

const clusterQueueName = "tally-notifications"

type clusterE2E struct {
	b      bins
	v      *clusterVhost
	api    *api
	corpus *corpus
	prefix string
}

// setupCluster makes the test's virtual host on the cluster, with the
// service exchanges a cloud would have, and starts the Reporting API.
func setupCluster(t *testing.T) *clusterE2E {
	t.Helper()
	if testing.Short() {
		t.Skip("end-to-end test on the RabbitMQ 4 cluster")
	}
	testkit.NeedOslo(t)
	e := &clusterE2E{b: buildBinaries(t), corpus: loadCorpus(t), prefix: randHex(4)}
	e.v = newClusterVhost(t)
	e.v.declareExchanges(t, e.corpus.exchanges()...)
	e.api = startAPI(t, e.b)
	return e
}

// collector is a collector on the three nodes with the default settings
// (quorum queue), its own outbox and replica name (the tests run several on
// one host), and extra on top.
func (e *clusterE2E) collector(t *testing.T, extra ...string) *collector {
	t.Helper()
	env := append([]string{"TALLY_OSC_EXCHANGES=" + strings.Join(e.corpus.exchanges(), ","),
		"TALLY_OSC_REPLICA_NAME=c4-" + randHex(4)}, extra...)
	return newCollectorAt(t, e.b, e.v.transportURL(), e.api.url(), e.api.token, env...)
}

// publish sends notifications [from, to) through oslo's Notifier on the
// three nodes' transport URL, in procs processes. oslo waits for a publisher
// confirm of each message and publishes again after a lost connection; what
// it could not send it logs and drops (osloRun.Dropped).
func (e *clusterE2E) publish(from, to, procs int, only ...int) osloRun {
	return publishOsloURL(e.v.transportURL(), e.prefix, from, to, procs, only...)
}

func (e *clusterE2E) stopNode(t *testing.T, n int) {
	t.Helper()
	testkit.StopRabbitMQ4Node(t, n)
	e.v.down[n] = true
}

func (e *clusterE2E) startNode(t *testing.T, n int) {
	t.Helper()
	testkit.StartRabbitMQ4Node(t, n)
	delete(e.v.down, n)
}

// deliverAll waits until the API holds n distinct events and answers its
// stats and how many dead letters it replayed. A notification whose mapper
// call overran its deadline (a process stalled with its outbox volume, or a
// machine starved of CPU, overruns even the harness's generous one) is not
// lost but kept as a dead letter; like an operator, deliverAll
// replays the dead letters of the collectors that run (POST
// /deadletters/replay) and logs them. each, when not nil, runs at every
// look.
func deliverAll(t *testing.T, a *api, cs []*collector, n int, limit time.Duration, each func()) (apiStats, int) {
	t.Helper()
	var st apiStats
	replayed := 0
	lastReplay := time.Now()
	testkit.WaitUntil(t, limit, fmt.Sprintf("the Reporting API to hold %d events", n), func() (bool, string) {
		if each != nil {
			each()
		}
		st = a.stats(t)
		if st.Accepted >= int64(n) {
			return true, ""
		}
		if time.Since(lastReplay) > 2*time.Second {
			lastReplay = time.Now()
			for i, c := range cs {
				if c.p == nil || !c.p.running() {
					continue
				}
				if sum(c.metrics(t), "tally_collector_deadletters") == 0 {
					continue
				}
				replayed += replayDeadLetters(t, c, i+1)
			}
		}
		return false, fmt.Sprintf("the Reporting API holds %d of %d events (%d duplicates; %d dead letters replayed)",
			st.Accepted, n, st.Duplicates, replayed)
	})
	return st, replayed
}

// replayDeadLetters logs the dead letters of a collector and replays them.
func replayDeadLetters(t *testing.T, c *collector, which int) int {
	t.Helper()
	code, body, err := c.get("/deadletters?after=0&limit=1000")
	if err != nil || code != 200 {
		t.Fatalf("collector %d: GET /deadletters: %d %v", which, code, err)
	}
	var page struct {
		DeadLetters []struct {
			Seq       uint64 `json:"seq"`
			EventType string `json:"event_type"`
			Module    string `json:"module"`
			Reason    string `json:"reason"`
		} `json:"dead_letters"`
	}
	if err := json.Unmarshal([]byte(body), &page); err != nil {
		t.Fatalf("collector %d: dead letters: %v", which, err)
	}
	for _, d := range page.DeadLetters {
		t.Logf("%s collector %d: dead letter %d: %s, %s, %s", stamp(), which, d.Seq, d.EventType, d.Module, d.Reason)
	}
	req, _ := http.NewRequest("POST", "http://"+c.httpAddr+"/deadletters/replay", nil)
	resp, err := (&http.Client{Timeout: time.Minute}).Do(req)
	if err != nil {
		t.Fatalf("collector %d: replay: %v", which, err)
	}
	defer resp.Body.Close()
	var rep struct {
		Replayed  int `json:"replayed"`
		Remaining int `json:"remaining"`
	}
	b, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != 200 || json.Unmarshal(b, &rep) != nil {
		t.Fatalf("collector %d: replay: %d %s", which, resp.StatusCode, b)
	}
	t.Logf("%s collector %d: %d dead letters replayed, %d remain", stamp(), which, rep.Replayed, rep.Remaining)
	return rep.Replayed
}

// logLine is one JSON line of the collector's log.
type logLine struct {
	Time    string `json:"time"`
	Level   string `json:"level"`
	Message string `json:"message"`
	Broker  string `json:"broker"`
	Error   string `json:"error"`
}

func logLines(out string) []logLine {
	var ls []logLine
	for _, raw := range strings.Split(out, "\n") {
		var l logLine
		if json.Unmarshal([]byte(raw), &l) == nil && l.Message != "" {
			ls = append(ls, l)
		}
	}
	return ls
}

// brokerNode answers the node of a logged broker URL
// (amqp://guest:[redacted]@127.0.0.1:5683/vhost), or 0.
func (v *clusterVhost) brokerNode(redacted string) int {
	rest := redacted[strings.LastIndex(redacted, "@")+1:]
	host, _, _ := strings.Cut(rest, "/")
	return v.nodeOf(host)
}

// consumingNodes lists, in order, the node each session of the run consumed
// from.
func (v *clusterVhost) consumingNodes(out string) []int {
	var ns []int
	for _, l := range logLines(out) {
		if l.Message == "consuming" {
			ns = append(ns, v.brokerNode(l.Broker))
		}
	}
	return ns
}

func count(out, message string) int {
	return strings.Count(out, `"message":"`+message+`"`)
}

func stamp() string { return time.Now().Format("15:04:05.000") }

// TestClusterQuorumQueue: with QUEUE_TYPE unset the collector declares a
// quorum queue with x-delivery-limit -1 on RabbitMQ 4, as rabbitmqctl reads
// it back, replicated on the three nodes. A collector set to
// QUEUE_TYPE=classic started against it then reports the mismatch, is not
// ready, and deletes nothing: the queue keeps its type and its backlog, which
// the quorum collector then delivers in full.
func TestClusterQuorumQueue(t *testing.T) {
	e := setupCluster(t)
	qc := e.collector(t)
	qc.start(t)
	qc.waitReady(t)

	out := e.v.ctl(t, "list_queues", "-p", e.v.name, "--no-table-headers", "--quiet", "name", "type", "arguments")
	t.Logf("rabbitmqctl list_queues -p %s name type arguments:\n%s", e.v.name, out)
	var line string
	for _, l := range strings.Split(out, "\n") {
		if strings.HasPrefix(l, clusterQueueName+"\t") {
			line = l
		}
	}
	f := strings.Split(line, "\t")
	if len(f) != 3 || f[1] != "quorum" || !strings.Contains(f[2], `{"x-delivery-limit",-1}`) || !strings.Contains(f[2], `{"x-queue-type","quorum"}`) {
		t.Fatalf("queue %s as declared: %q, want type quorum with x-delivery-limit -1", clusterQueueName, line)
	}
	if q, _ := e.v.queue(t, clusterQueueName); len(q.Members) != 3 {
		t.Errorf("quorum queue members %v, want the three nodes", q.Members)
	}

	if code, _ := qc.p.stop(t, 40*time.Second); code != 0 {
		t.Fatalf("stop: exit %d", code)
	}
	const n = 200
	if err := e.publish(0, n, 1).Err(); err != nil {
		t.Fatal(err)
	}
	testkit.WaitFor(t, time.Minute, "the backlog in the queue", func() bool {
		q, _ := e.v.queue(t, clusterQueueName)
		return q.Messages == n
	})

	cc := e.collector(t, "TALLY_OSC_QUEUE_TYPE=classic")
	cc.start(t)
	testkit.WaitFor(t, time.Minute, "the mismatch reported twice (it is retried)", func() bool {
		return strings.Count(cc.p.out.String(), "queue exists with another type") >= 2
	})
	for _, l := range logLines(cc.p.out.String()) {
		if strings.Contains(l.Error, "queue exists with another type") {
			t.Logf("reported as %s: %q: %s", l.Level, l.Message, l.Error)
			if l.Level != "error" || !strings.Contains(l.Error, "nothing was deleted") || !strings.Contains(l.Error, "QUEUE_TYPE") {
				t.Errorf("the report should be an error naming QUEUE_TYPE and saying nothing was deleted: %+v", l)
			}
			break
		}
	}
	if code, _, err := cc.get("/readyz"); err != nil || code != 503 {
		t.Errorf("/readyz of the mismatched collector: %d %v, want 503", code, err)
	}
	// list_queues reads a quorum queue's count from statistics its members
	// emit every few seconds, and a read between two may answer 0: wait for
	// the count to settle, as the queue holds what nobody consumed.
	var q clusterQueue
	var ok bool
	testkit.WaitFor(t, 30*time.Second, "the queue's count back at the backlog", func() bool {
		q, ok = e.v.queue(t, clusterQueueName)
		return ok && q.Messages == n
	})
	if limit, _ := q.argument("x-delivery-limit"); !ok || q.Type != "quorum" || q.Messages != n || limit != float64(-1) {
		t.Fatalf("after the classic declare the queue is %+v (exists %v), want quorum, x-delivery-limit -1, %d messages", q, ok, n)
	}
	if code, _ := cc.p.stop(t, 40*time.Second); code != 0 {
		t.Errorf("stop of the mismatched collector: exit %d", code)
	}

	qc.start(t)
	qc.waitReady(t)
	deliverAll(t, e.api, []*collector{qc}, n, 2*time.Minute, nil)
	checkExactSet(t, e.api, e.prefix, n)
	checkLedgerTotals(t, qc, n)
}

// smallTmpfs mounts a tmpfs of size (mount's size= syntax) on a directory of
// the test, unmounted when it ends.
func smallTmpfs(t *testing.T, size string) string {
	t.Helper()
	dir := t.TempDir()
	if err := syscall.Mount("tally-test-outbox", dir, "tmpfs", 0, "size="+size+",mode=0700"); err != nil {
		t.Fatalf("mounting a %s tmpfs needs root (CAP_SYS_ADMIN): %v", size, err)
	}
	t.Cleanup(func() { _ = syscall.Unmount(dir, syscall.MNT_DETACH) })
	return dir
}

// TestClusterRedeliveredPastTwenty: the outbox refuses every insert (its
// filesystem holds less than the free-space reserve), so the same
// deliveries go back to the quorum queue again and again: nacked every
// second, returned by a connection the broker closes, returned by a
// collector killed with SIGKILL. RabbitMQ 4's default delivery limit of 20
// would have dropped them; x-delivery-limit -1 keeps them, as the broker's
// own x-delivery-count shows, and once the filesystem has room every one of
// them reaches the Reporting API.
func TestClusterRedeliveredPastTwenty(t *testing.T) {
	e := setupCluster(t)
	// 64 MiB: below the outbox's reserve of free space (16 memory tables,
	// 128 MiB), so every insert is refused (ErrRefused, disk full).
	mnt := smallTmpfs(t, "64m")
	c := e.collector(t, "TALLY_OSC_BUFFER_PATH="+filepath.Join(mnt, "outbox"))
	c.start(t)
	c.waitReady(t)

	const n = 40 // below the prefetch window: each round redelivers all of them
	if err := e.publish(0, n, 1).Err(); err != nil {
		t.Fatal(err)
	}
	var nackedBefore float64 // nacks of the runs killed before the current one
	nacked := func() float64 { return sum(c.metrics(t), "tally_collector_nacked_total") }
	testkit.WaitFor(t, 2*time.Minute, "three rounds of refused inserts", func() bool { return nacked() >= 3*n })
	if !strings.Contains(c.p.out.String(), "outbox refused the batch; requeued") {
		t.Fatalf("the outbox did not refuse:\n%s", tail(c.p.out.String(), 4000))
	}

	t.Logf("%s close_all_connections on vhost %s", stamp(), e.v.name)
	e.v.ctl(t, "close_all_connections", "--vhost", e.v.name, "end-to-end test: connections closed on purpose")
	testkit.WaitFor(t, 2*time.Minute, "consuming again after the closed connection", func() bool {
		return count(c.p.out.String(), "consuming") >= 2 && nacked() >= 6*n
	})
	nackedBefore += nacked()
	t.Logf("%s kill -9 the collector while it holds refused deliveries", stamp())
	c.p.kill9(t)
	c.start(t)
	testkit.WaitFor(t, 2*time.Minute, "the restarted collector consuming", func() bool {
		return count(c.p.out.String(), "consuming") >= 1
	})
	testkit.WaitFor(t, 3*time.Minute, "more than 20 rounds in all", func() bool { return nacked() >= 20*n })
	nackedBefore += nacked()
	if code, _ := c.p.stop(t, 40*time.Second); code != 0 {
		t.Errorf("stop while the outbox refuses: exit %d", code)
	}

	// Read every message once with a consumer of the test: the broker's
	// x-delivery-count says how often each was delivered before. Closing the
	// channel returns them all.
	counts := readDeliveryCounts(t, e.v, n)
	ids := make([]string, 0, len(counts))
	minCount, maxCount := int64(1<<62), int64(0)
	for id, k := range counts {
		ids = append(ids, id)
		minCount, maxCount = min(minCount, k), max(maxCount, k)
	}
	sort.Strings(ids)
	t.Logf("x-delivery-count of the %d messages: %d to %d; collector nacks in all: %.0f", len(counts), minCount, maxCount, nackedBefore)
	if len(counts) != n {
		t.Fatalf("the queue holds %d distinct messages, want %d", len(counts), n)
	}
	for i := 0; i < n; i++ {
		if _, ok := counts[messageID(e.prefix, i)]; !ok {
			t.Errorf("message %s is not in the queue", messageID(e.prefix, i))
		}
	}
	if minCount <= 20 {
		t.Fatalf("the least redelivered message has x-delivery-count %d, want more than 20", minCount)
	}
	q, _ := e.v.queue(t, clusterQueueName)
	if limit, ok := q.argument("x-delivery-limit"); !ok || limit != float64(-1) {
		t.Errorf("x-delivery-limit %v, want -1", limit)
	}

	// Room on the filesystem: the same collector and outbox deliver them.
	if err := syscall.Mount("tally-test-outbox", mnt, "tmpfs", syscall.MS_REMOUNT, "size=1g,mode=0700"); err != nil {
		t.Fatalf("remount the tmpfs larger: %v", err)
	}
	t.Logf("%s the outbox's filesystem has room again", stamp())
	c.start(t)
	c.waitReady(t)
	st, replayed := deliverAll(t, e.api, []*collector{c}, n, 2*time.Minute, nil)
	checkExactSet(t, e.api, e.prefix, n)
	t.Logf("published %d, delivered %d (%d dead letters replayed), duplicates %d", n, st.Accepted, replayed, st.Duplicates)
	testkit.WaitFor(t, time.Minute, "the queue empty", func() bool {
		q, _ := e.v.queue(t, clusterQueueName)
		return q.Messages == 0
	})
	// The refused rounds left nothing in the ledger (a refused batch commits
	// nothing, its count included); the delivered one balances it.
	checkLedgerTotals(t, c, n)
}

// readDeliveryCounts takes want messages from the collector's queue without
// acknowledging them and answers message_id -> x-delivery-count; closing the
// channel returns them.
func readDeliveryCounts(t *testing.T, v *clusterVhost, want int) map[string]int64 {
	t.Helper()
	conn := v.dial(t)
	ch, err := conn.Channel()
	if err != nil {
		t.Fatal(err)
	}
	defer ch.Close()
	if err := ch.Qos(want, 0, false); err != nil {
		t.Fatal(err)
	}
	ds, err := ch.Consume(clusterQueueName, "", false, false, false, false, nil)
	if err != nil {
		t.Fatal(err)
	}
	counts := map[string]int64{}
	timeout := time.After(time.Minute)
	for len(counts) < want {
		select {
		case d, ok := <-ds:
			if !ok {
				t.Fatal("the test consumer was cancelled")
			}
			var env struct {
				Message string `json:"oslo.message"`
			}
			var inner struct {
				MessageID string `json:"message_id"`
			}
			if err := json.Unmarshal(d.Body, &env); err != nil || json.Unmarshal([]byte(env.Message), &inner) != nil {
				t.Fatalf("not an oslo envelope: %.200s", d.Body)
			}
			k, _ := d.Headers["x-delivery-count"].(int64)
			counts[inner.MessageID] = k
		case <-timeout:
			t.Fatalf("read %d of %d messages from the queue", len(counts), want)
		}
	}
	return counts
}

// TestClusterDeliveryLimitPolicy shows the hazard docs/broker.md warns of,
// with a plain AMQP client: on RabbitMQ 4 a delivery-limit from a policy
// wins over the x-delivery-limit -1 the collector declares, and a message
// requeued past it is dropped; without the argument RabbitMQ 4 applies its
// own default limit of 20; with it, and no policy, nothing is dropped.
func TestClusterDeliveryLimitPolicy(t *testing.T) {
	if testing.Short() {
		t.Skip("end-to-end test on the RabbitMQ 4 cluster")
	}
	v := newClusterVhost(t)
	ch, err := v.dial(t).Channel()
	if err != nil {
		t.Fatal(err)
	}
	collectorArgs := amqp.Table{"x-queue-type": "quorum", "x-delivery-limit": int64(-1)}
	queues := []struct {
		name      string
		args      amqp.Table
		survives  int // deliveries (each nacked with requeue) the message survives, -1: all
		deliverTo int
	}{
		{"limited-by-policy", collectorArgs, 3, 10},
		{"no-limit-argument", amqp.Table{"x-queue-type": "quorum"}, 21, 30},
		{"as-declared", collectorArgs, -1, 30},
	}
	v.ctl(t, "set_policy", "-p", v.name, "--apply-to", "quorum_queues", "tally-test-delivery-limit",
		"^limited-by-policy$", `{"delivery-limit":2}`)
	for _, q := range queues {
		if _, err := ch.QueueDeclare(q.name, true, false, false, false, q.args); err != nil {
			t.Fatalf("declare %s: %v", q.name, err)
		}
	}
	testkit.WaitFor(t, 30*time.Second, "the policy applied", func() bool {
		q, _ := v.queue(t, "limited-by-policy")
		return q.Policy == "tally-test-delivery-limit"
	})
	q, _ := v.queue(t, "limited-by-policy")
	limit, _ := q.argument("x-delivery-limit")
	t.Logf("limited-by-policy: arguments x-delivery-limit %v, policy %s, effective policy definition %s",
		limit, q.Policy, string(q.EffectivePolicyDefinition))
	if limit != float64(-1) || !strings.Contains(string(q.EffectivePolicyDefinition), `"delivery-limit",2`) {
		t.Fatalf("queue %+v, want x-delivery-limit -1 and the policy's delivery-limit 2", q)
	}

	for _, q := range queues {
		if err := ch.Publish("", q.name, false, false, amqp.Publishing{DeliveryMode: amqp.Persistent, Body: []byte(q.name)}); err != nil {
			t.Fatal(err)
		}
	}
	for _, q := range queues {
		got := 0
		var lastCount int64
		// A requeued message is back within milliseconds; one that stays
		// away for 3 s was dropped.
		last := time.Now()
		for got < q.deliverTo && time.Since(last) < 3*time.Second {
			d, ok, err := ch.Get(q.name, false)
			if err != nil {
				t.Fatalf("get %s: %v", q.name, err)
			}
			if !ok {
				time.Sleep(20 * time.Millisecond)
				continue
			}
			last = time.Now()
			got++
			lastCount, _ = d.Headers["x-delivery-count"].(int64)
			if err := d.Nack(false, true); err != nil {
				t.Fatal(err)
			}
		}
		t.Logf("%s: delivered %d times (last x-delivery-count %d)", q.name, got, lastCount)
		want := q.survives
		if want < 0 {
			want = q.deliverTo
		}
		if got != want {
			t.Errorf("%s: the message was delivered %d times, want %d", q.name, got, want)
		}
	}
	// list_queues reports a quorum queue's message count from statistics
	// the broker emits every few seconds (collect_statistics_interval, 5 s by
	// default): a message dropped a moment ago may still be counted. Wait
	// for the counts to settle rather than read them once.
	want := func(q string) int {
		for _, qq := range queues {
			if qq.name == q && qq.survives < 0 {
				return 1
			}
		}
		return 0
	}
	seen := ""
	testkit.WaitFor(t, 30*time.Second, "every queue's message count to settle", func() bool {
		after, counts := v.queues(t), ""
		for _, q := range queues {
			counts += fmt.Sprintf(" %s=%d (want %d)", q.name, after[q.name].Messages, want(q.name))
		}
		if counts != seen {
			t.Logf("message counts:%s", counts)
			seen = counts
		}
		for _, q := range queues {
			if after[q.name].Messages != want(q.name) {
				return false
			}
		}
		return true
	})
}

// TestClusterFailover: three collectors, each with its own outbox, share
// the quorum queue as competing consumers, with a transport URL listing the
// three nodes. While oslo publishes 20 000 notifications from several
// processes, one collector is killed with SIGKILL twice (and restarted),
// the node leading the queue is stopped hard and started again, then
// another node. Every published notification reaches the Reporting API;
// duplicates are counted there. Each collector fails over to a live node
// and goes on consuming.
func TestClusterFailover(t *testing.T) {
	e := setupCluster(t)
	const (
		n     = 20000
		bulk  = 18000 // published while the faults happen; the rest after them
		procs = 6
	)
	cs := make([]*collector, 3)
	for i := range cs {
		cs[i] = e.collector(t)
		cs[i].start(t)
	}
	for _, c := range cs {
		c.waitReady(t)
	}
	q, _ := e.v.queue(t, clusterQueueName)
	leader := q.leaderNode()
	if leader == 0 {
		t.Fatalf("no leader in %+v", q)
	}
	// The collectors dial the nodes in the order listed, so all three
	// consume from node 1. The second node stopped is node 1 unless it led
	// the queue (then node 2, where they went): either way every collector
	// loses its node at least once.
	second := 1
	if leader == 1 {
		second = 2
	}
	t.Logf("%s queue leader rabbit%d, members %v; collectors consume from nodes %v %v %v", stamp(), leader, q.Members,
		e.v.consumingNodes(cs[0].p.out.String()), e.v.consumingNodes(cs[1].p.out.String()), e.v.consumingNodes(cs[2].p.out.String()))

	begin := time.Now()
	pubDone := make(chan osloRun, 1)
	go func() { pubDone <- e.publish(0, bulk, procs) }()
	var bulkRun osloRun
	published := false
	bulkPublished := func(r osloRun) {
		t.Helper()
		bulkRun, published = r, true
		if r.Failed != nil {
			t.Fatalf("oslo publishers: %v", r.Failed)
		}
	}
	// progress waits until the API has delta more events, or the bulk
	// publish ended and everything published so far is delivered.
	progress := func(delta int64, what string) {
		t.Helper()
		start := e.api.stats(t).Accepted
		testkit.WaitFor(t, 5*time.Minute, what, func() bool {
			if !published {
				select {
				case r := <-pubDone:
					bulkPublished(r)
				default:
				}
			}
			// Once the bulk is out, the faults go on without waiting.
			return published || e.api.stats(t).Accepted >= start+delta
		})
	}
	fault := func(format string, args ...any) {
		t.Helper()
		st := e.api.stats(t)
		t.Logf("%s [+%5.1fs] %s (API: %d events, %d duplicates)", stamp(), time.Since(begin).Seconds(),
			fmt.Sprintf(format, args...), st.Accepted, st.Duplicates)
	}
	allReady := func() {
		t.Helper()
		for _, c := range cs {
			c.waitReady(t)
		}
	}
	// killVictim kills collector 2 with SIGKILL and starts it again.
	killVictim := func(what string) {
		t.Helper()
		victim := cs[1]
		fault("%s", what)
		victim.p.kill9(t)
		victim.start(t)
		victim.waitReady(t)
	}
	// nodeDown stops node with SIGKILL, waits for every collector to be
	// ready again, lets delta more events through while the node is down
	// and starts it again.
	nodeDown := func(node int, role string, delta int64, what string) {
		t.Helper()
		fault("stop node %d (%s) with SIGKILL", node, role)
		e.stopNode(t, node)
		allReady()
		q, _ := e.v.queue(t, clusterQueueName)
		fault("collectors ready again; leader %s", q.Leader)
		progress(delta, what)
		fault("start node %d", node)
		e.startNode(t, node)
		fault("node %d back", node)
	}

	progress(1000, "1000 events delivered")
	killVictim("kill -9 collector 2")
	progress(1000, "1000 more events")
	nodeDown(leader, "the queue leader", 1000, "1000 more events with the leader's node down")
	progress(500, "500 more events")
	killVictim("kill -9 collector 2 again")
	progress(500, "500 more events")
	nodeDown(second, "the second to stop", 1000, "1000 more events with a second node down")

	if !published {
		bulkPublished(<-pubDone)
	}
	fault("bulk of %d published; the oslo Notifier dropped %d of them", bulk, len(bulkRun.Dropped))
	if len(bulkRun.Dropped) > 0 {
		// oslo logs a notification it could not send and goes on: the
		// broker never had it. Logged here, and published again below, so
		// that the API must end with all n.
		t.Logf("the oslo Notifier dropped %v:\n%s", bulkRun.Dropped, tail(bulkRun.Log, 6000))
	}

	// The rest, after the faults: every collector must take a share.
	ackedBefore := make([]float64, len(cs))
	for i, c := range cs {
		ackedBefore[i] = sum(c.metrics(t), "tally_collector_acked_total")
	}
	if err := e.publish(bulk, n, 4).Err(); err != nil {
		t.Fatal(err)
	}
	if len(bulkRun.Dropped) > 0 {
		if err := e.publish(0, bulk, 1, bulkRun.Dropped...).Err(); err != nil {
			t.Fatal(err)
		}
	}
	fault("all %d published (%d of them again)", n, len(bulkRun.Dropped))
	st, replayed := deliverAll(t, e.api, cs, n, 5*time.Minute, nil)
	fault("all %d delivered", n)
	checkExactSet(t, e.api, e.prefix, n)
	// Each replica's ledger balances through the kills and the node losses,
	// and together they committed every notification at least once.
	var committed int64
	for _, c := range cs {
		tot, _ := c.checkLedger(t)
		committed += tot.Committed
	}
	if committed < n {
		t.Errorf("the replicas' ledgers count %d committed, want at least %d", committed, n)
	}
	testkit.WaitFor(t, time.Minute, "the queue empty, nothing unacknowledged", func() bool {
		q, _ := e.v.queue(t, clusterQueueName)
		return q.Messages == 0 && q.MessagesUnacknowledged == 0
	})

	for i, c := range cs {
		var runs []string
		for _, p := range c.past {
			runs = append(runs, p.out.String())
		}
		runs = append(runs, c.p.out.String())
		failovers := 0
		var sessions [][]int
		for _, out := range runs {
			ns := e.v.consumingNodes(out)
			sessions = append(sessions, ns)
			for j := 1; j < len(ns); j++ {
				if ns[j] != ns[j-1] {
					failovers++
				}
			}
		}
		m := c.metrics(t)
		acked := sum(m, "tally_collector_acked_total")
		t.Logf("collector %d: %d runs, nodes consumed from per run %v, %d failovers; last run: consumed %.0f, acked %.0f (%.0f after the faults), nacked %.0f, reconnects %.0f",
			i+1, len(runs), sessions, failovers, sum(m, "tally_collector_consumed_total"), acked, acked-ackedBefore[i],
			sum(m, "tally_collector_nacked_total"), sum(m, "tally_collector_reconnects_total"))
		if failovers == 0 {
			t.Errorf("collector %d never moved to another node", i+1)
		}
		if acked <= ackedBefore[i] {
			t.Errorf("collector %d took nothing of the last %d notifications", i+1, n-bulk)
		}
	}
	t.Logf("published %d notifications (%d dropped by the oslo Notifier and published again), the Reporting API holds %d distinct events (%d of them dead letters replayed), %d duplicates counted, requests %v",
		n, len(bulkRun.Dropped), st.Accepted, replayed, st.Duplicates, st.Requests)
	for i, c := range cs {
		if code, _ := c.p.stop(t, 40*time.Second); code != 0 {
			t.Errorf("collector %d stop: exit %d", i+1, code)
		}
	}
}

// clusterStatus is what the tests read of rabbitmqctl status.
type clusterStatus struct {
	Alarms    []json.RawMessage  `json:"alarms"`
	Watermark map[string]float64 `json:"vm_memory_high_watermark_setting"`
}

func clusterNodeStatus(t *testing.T, node int) clusterStatus {
	t.Helper()
	out := testkit.RabbitMQ4Ctl(t, node, "status", "--formatter", "json")
	var st clusterStatus
	if err := json.Unmarshal([]byte(out), &st); err != nil {
		t.Fatalf("status of node %d: %v\n%s", node, err, out)
	}
	return st
}

// memoryAlarm raises a memory alarm on node by setting its high watermark
// to one byte, and sets the watermark back when the test ends, whatever
// happens; the returned func sets it back earlier.
func memoryAlarm(t *testing.T, node int) (clear func()) {
	t.Helper()
	st := clusterNodeStatus(t, node)
	restore := []string{"set_vm_memory_high_watermark"}
	switch {
	case st.Watermark["absolute"] > 0:
		restore = append(restore, "absolute", strconv.FormatInt(int64(st.Watermark["absolute"]), 10))
	case st.Watermark["relative"] > 0:
		restore = append(restore, strconv.FormatFloat(st.Watermark["relative"], 'f', -1, 64))
	default:
		t.Fatalf("node %d's memory high watermark %v is neither absolute nor relative", node, st.Watermark)
	}
	cleared := false
	clear = func() {
		if cleared {
			return
		}
		if _, err := testkit.RabbitMQ4CtlErr(t, node, restore...); err != nil {
			t.Errorf("setting the memory high watermark of node %d back (%s): %v", node, strings.Join(restore[1:], " "), err)
			return
		}
		cleared = true
	}
	t.Cleanup(clear)
	testkit.RabbitMQ4Ctl(t, node, "set_vm_memory_high_watermark", "absolute", "1")
	return clear
}

// TestClusterMemoryAlarm: a memory alarm blocks oslo's publishers across
// the cluster, while the collector goes on consuming the backlog: consuming
// is allowed under an alarm. /livez and /readyz stay 200. RabbitMQ blocks a
// connection, and sends it connection.blocked, only once it publishes; the
// collector never does, so tally_collector_broker_blocked stays 0. When the
// alarm clears, what the blocked publisher held arrives.
func TestClusterMemoryAlarm(t *testing.T) {
	e := setupCluster(t)
	c := e.collector(t)
	c.start(t)
	c.waitReady(t)
	// A backlog to consume under the alarm.
	if code, _ := c.p.stop(t, 40*time.Second); code != 0 {
		t.Fatalf("stop: exit %d", code)
	}
	const backlog, during = 1000, 200
	if err := e.publish(0, backlog, 2).Err(); err != nil {
		t.Fatal(err)
	}

	const alarmNode = 1
	clearAlarm := memoryAlarm(t, alarmNode)
	t.Logf("%s memory high watermark of node %d set to 1 byte", stamp(), alarmNode)
	testkit.WaitFor(t, time.Minute, "the memory alarm in effect", func() bool {
		return len(clusterNodeStatus(t, alarmNode).Alarms) > 0
	})
	t.Logf("%s alarms: %s", stamp(), clusterNodeStatus(t, alarmNode).Alarms)

	pubDone := make(chan error, 1)
	go func() { pubDone <- e.publish(backlog, backlog+during, 1).Err() }()
	testkit.WaitFor(t, time.Minute, "the oslo publisher blocked", func() bool {
		out := e.v.ctl(t, "list_connections", "--formatter", "json", "vhost", "state", "client_properties")
		var conns []struct {
			Vhost  string          `json:"vhost"`
			State  string          `json:"state"`
			Client json.RawMessage `json:"client_properties"`
		}
		if err := json.Unmarshal([]byte(out), &conns); err != nil {
			t.Fatalf("list_connections: %v\n%s", err, out)
		}
		for _, c := range conns {
			if c.Vhost == e.v.name && c.State == "blocked" && strings.Contains(string(c.Client), "oslo_publish.py") {
				return true
			}
		}
		return false
	})
	t.Logf("%s the oslo publisher is blocked", stamp())

	c.start(t)
	var maxBlocked float64
	probe := func() {
		t.Helper()
		for _, path := range []string{"/livez", "/readyz"} {
			if code, _, err := c.get(path); err != nil || code != 200 {
				t.Fatalf("%s under the memory alarm: %d %v", path, code, err)
			}
		}
		maxBlocked = max(maxBlocked, sum(c.metrics(t), "tally_collector_broker_blocked"))
	}
	c.waitReady(t)
	deliverAll(t, e.api, []*collector{c}, backlog, 2*time.Minute, probe)
	if len(clusterNodeStatus(t, alarmNode).Alarms) == 0 {
		t.Fatal("the alarm cleared before the backlog was consumed")
	}
	select {
	case err := <-pubDone:
		t.Fatalf("the oslo publisher finished under the alarm: %v", err)
	default:
	}
	t.Logf("%s backlog of %d delivered under the alarm; tally_collector_broker_blocked at most %v", stamp(), backlog, maxBlocked)
	if maxBlocked != 0 {
		t.Errorf("tally_collector_broker_blocked rose to %v for a connection that never publishes", maxBlocked)
	}

	clearAlarm()
	t.Logf("%s memory high watermark set back", stamp())
	if err := <-pubDone; err != nil {
		t.Fatal(err)
	}
	st, replayed := deliverAll(t, e.api, []*collector{c}, backlog+during, 2*time.Minute, probe)
	checkExactSet(t, e.api, e.prefix, backlog+during)
	t.Logf("published %d, delivered %d (%d dead letters replayed), duplicates %d", backlog+during, st.Accepted, replayed, st.Duplicates)
	checkLedgerTotals(t, c, backlog+during)
	if code, _ := c.p.stop(t, 40*time.Second); code != 0 {
		t.Errorf("stop: exit %d", code)
	}
}

// freezableDir mounts a 256 MiB ext4 file system, in a file of the test's
// temporary directory on a loop device, that freeze can stall: with
// fsfreeze every write to it waits, as on a volume that stopped answering.
// It is unmounted when the test ends.
func freezableDir(t *testing.T) string {
	t.Helper()
	mkfs := testkit.LookPath(t, "mkfs.ext4", "e2fsprogs")
	testkit.LookPath(t, "fsfreeze", "util-linux")
	mount := testkit.LookPath(t, "mount", "mount")
	img := filepath.Join(t.TempDir(), "outbox.ext4")
	if err := os.WriteFile(img, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	// Above the outbox's 128 MiB reserve of free space, sparse.
	if err := os.Truncate(img, 256<<20); err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command(mkfs, "-q", "-F", img).CombinedOutput(); err != nil {
		t.Fatalf("mkfs.ext4: %v\n%s", err, out)
	}
	dir := t.TempDir()
	if out, err := exec.Command(mount, "-o", "loop", img, dir).CombinedOutput(); err != nil {
		t.Fatalf("mounting an ext4 image on a loop device needs root and /dev/loop-control: %v\n%s", err, out)
	}
	t.Cleanup(func() {
		_ = exec.Command("fsfreeze", "--unfreeze", dir).Run()
		if out, err := exec.Command("umount", dir).CombinedOutput(); err != nil {
			t.Errorf("umount %s: %v\n%s", dir, err, out)
			_ = exec.Command("umount", "-l", dir).Run()
		}
	})
	return dir
}

// freeze stalls every write to the file system of dir for d. The thaw is
// done by a process of its own session, which thaws even if the test
// process dies meanwhile; freeze returns once the file system is frozen,
// and the returned channel is closed once it is thawed.
func freeze(t *testing.T, dir string, d time.Duration) <-chan struct{} {
	t.Helper()
	script := `fsfreeze --freeze "$1" || exit 1; echo frozen; sleep "$2"; fsfreeze --unfreeze "$1"`
	cmd := exec.Command("/bin/sh", "-c", script, "freeze", dir, strconv.FormatFloat(d.Seconds(), 'f', 1, 64))
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, 16)
	k, _ := out.Read(buf)
	if !strings.HasPrefix(string(buf[:k]), "frozen") {
		_ = cmd.Wait()
		t.Fatalf("fsfreeze --freeze %s failed", dir)
	}
	thawed := make(chan struct{})
	go func() {
		_, _ = io.Copy(io.Discard, out)
		_ = cmd.Wait()
		close(thawed)
	}()
	return thawed
}

// TestClusterConsumerTimeout: the outbox's volume stalls (frozen) while
// notifications stream in, so the collector holds deliveries it cannot
// commit past the queue's consumer timeout (a policy of 1 s). RabbitMQ
// closes the channel; once the volume answers again the collector opens a
// new session, the broker redelivers what was held, and nothing is lost.
func TestClusterConsumerTimeout(t *testing.T) {
	e := setupCluster(t)
	const timeoutMs = 1000
	e.v.ctl(t, "set_policy", "-p", e.v.name, "--apply-to", "quorum_queues", "tally-test-consumer-timeout",
		"^"+clusterQueueName+"$", fmt.Sprintf(`{"consumer-timeout":%d}`, timeoutMs))
	dir := freezableDir(t)
	c := e.collector(t, "TALLY_OSC_BUFFER_PATH="+filepath.Join(dir, "outbox"))
	c.start(t)
	c.waitReady(t)
	q, _ := e.v.queue(t, clusterQueueName)
	t.Logf("queue %s: policy %s, effective %s", q.Name, q.Policy, string(q.EffectivePolicyDefinition))
	if !strings.Contains(string(q.EffectivePolicyDefinition), fmt.Sprintf(`"consumer-timeout",%d`, timeoutMs)) {
		t.Fatalf("the consumer-timeout policy is not in effect on the queue: %+v", q)
	}

	const n = 3000
	pubDone := make(chan error, 1)
	go func() { pubDone <- e.publish(0, n, 2).Err() }()
	testkit.WaitFor(t, 2*time.Minute, "300 events delivered", func() bool { return e.api.stats(t).Accepted >= 300 })

	const stall = 8 * time.Second
	t.Logf("%s outbox volume frozen for %s (consumer timeout %d ms)", stamp(), stall, timeoutMs)
	thawed := freeze(t, dir, stall)
	select {
	case <-thawed:
	case <-time.After(stall + time.Minute):
		t.Fatal("the volume was not thawed")
	}
	t.Logf("%s outbox volume thawed", stamp())

	testkit.WaitFor(t, 2*time.Minute, "the session ended by the consumer timeout, and a new one consuming", func() bool {
		out := c.p.out.String()
		return strings.Contains(out, "delivery acknowledgement on channel") && count(out, "consuming") >= 2
	})
	for _, l := range logLines(c.p.out.String()) {
		if l.Message == "broker session ended; reconnecting" {
			t.Logf("%s: %s", l.Message, l.Error)
		}
	}
	if err := <-pubDone; err != nil {
		t.Fatal(err)
	}
	st, replayed := deliverAll(t, e.api, []*collector{c}, n, 3*time.Minute, nil)
	checkExactSet(t, e.api, e.prefix, n)
	testkit.WaitFor(t, time.Minute, "the queue empty, nothing unacknowledged", func() bool {
		q, _ := e.v.queue(t, clusterQueueName)
		return q.Messages == 0 && q.MessagesUnacknowledged == 0
	})
	m := c.metrics(t)
	t.Logf("published %d, delivered %d (%d dead letters replayed), duplicates %d; collector: consumed %.0f, acked %.0f, reconnects %.0f",
		n, st.Accepted, replayed, st.Duplicates, sum(m, "tally_collector_consumed_total"), sum(m, "tally_collector_acked_total"),
		sum(m, "tally_collector_reconnects_total"))
	// The deliveries the broker took back at the timeout and redelivered are
	// consumed twice and counted so; every hour still balances.
	checkLedgerTotals(t, c, n)
	if code, _ := c.p.stop(t, 40*time.Second); code != 0 {
		t.Errorf("stop: exit %d", code)
	}
}
