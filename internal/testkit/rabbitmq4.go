package testkit

import (
	"bytes"
	"context"
	"fmt"
	"os/exec"
	"strings"
	"sync"
	"testing"
	"time"
)

// The three-node RabbitMQ 4 cluster of .ci/rabbitmq4-cluster (docs/broker.md,
// "A RabbitMQ 4 cluster for tests"). It is shared by every test package of a
// run and by people on the machine: a test names its queues and policies
// uniquely and deletes them.

// RabbitMQ4Script is the path of the cluster script, relative to the root of
// the repository.
const RabbitMQ4Script = ".ci/rabbitmq4-cluster"

// Time limits of the script's commands. A first `up` on a machine builds the
// root file system (a few minutes with a good mirror); later ones take
// seconds.
const (
	rabbitMQ4UpTimeout    = 30 * time.Minute
	rabbitMQ4CtlTimeout   = 3 * time.Minute
	rabbitMQ4StopTimeout  = 2 * time.Minute
	rabbitMQ4StartTimeout = 10 * time.Minute
)

var rabbitMQ4 struct {
	once sync.Once
	urls []string
	err  error
}

// RabbitMQ4Cluster runs `.ci/rabbitmq4-cluster up` once per test process and
// returns the AMQP URLs of the three nodes, node 1 first
// (amqp://guest:guest@127.0.0.1:5682/ …). It fails the test, with the
// script's stderr, when the cluster cannot be started; it never skips.
func RabbitMQ4Cluster(t testing.TB) []string {
	t.Helper()
	script := RepoPath(t, RabbitMQ4Script)
	rabbitMQ4.once.Do(func() {
		rabbitMQ4.urls, rabbitMQ4.err = rabbitMQ4Up(script)
	})
	if rabbitMQ4.err != nil {
		t.Fatalf("RabbitMQ 4 cluster: %v", rabbitMQ4.err)
	}
	return append([]string(nil), rabbitMQ4.urls...)
}

func rabbitMQ4Up(script string) ([]string, error) {
	stdout, err := runRabbitMQ4(script, rabbitMQ4UpTimeout, "up")
	if err != nil {
		return nil, err
	}
	var urls []string
	for _, line := range strings.Split(strings.TrimSpace(stdout), "\n") {
		if line = strings.TrimSpace(line); line != "" {
			urls = append(urls, line)
		}
	}
	if len(urls) != 3 {
		return nil, fmt.Errorf("%s up printed %d lines, want 3 AMQP URLs:\n%s", script, len(urls), stdout)
	}
	for _, u := range urls {
		if !strings.HasPrefix(u, "amqp://") {
			return nil, fmt.Errorf("%s up printed %q, want an AMQP URL", script, u)
		}
	}
	return urls, nil
}

// RabbitMQ4Root answers the root file system the cluster's nodes run
// chrooted into (`.ci/rabbitmq4-cluster root`): a process whose
// /proc/PID/root is this directory is one the script started in it.
func RabbitMQ4Root(tb testing.TB) string {
	tb.Helper()
	out, err := runRabbitMQ4(RepoPath(tb, RabbitMQ4Script), rabbitMQ4CtlTimeout, "root")
	if err != nil {
		tb.Fatalf("RabbitMQ 4 cluster root: %v", err)
	}
	return strings.TrimSpace(out)
}

// RabbitMQ4Ctl runs rabbitmqctl against node (1, 2 or 3) with args and
// returns its standard output. A non-zero exit fails the test.
func RabbitMQ4Ctl(t testing.TB, node int, args ...string) string {
	t.Helper()
	checkRabbitMQ4Node(t, node)
	out, err := runRabbitMQ4(RepoPath(t, RabbitMQ4Script), rabbitMQ4CtlTimeout, append([]string{"ctl", fmt.Sprint(node)}, args...)...)
	if err != nil {
		t.Fatalf("rabbitmqctl on node %d %s: %v\nstdout:\n%s", node, strings.Join(args, " "), err, out)
	}
	return out
}

// RabbitMQ4CtlErr is RabbitMQ4Ctl answering the error instead of failing the
// test: for a node that may be down, or for a cleanup.
func RabbitMQ4CtlErr(tb testing.TB, node int, args ...string) (string, error) {
	tb.Helper()
	checkRabbitMQ4Node(tb, node)
	return runRabbitMQ4(RepoPath(tb, RabbitMQ4Script), rabbitMQ4CtlTimeout, append([]string{"ctl", fmt.Sprint(node)}, args...)...)
}

// StopRabbitMQ4Node takes node (1, 2 or 3) away hard: its Erlang VM is
// killed with SIGKILL, as in a crash. The node is started again when the test
// ends (t.Cleanup), if the test has not done so, so that later tests find
// three nodes.
func StopRabbitMQ4Node(t testing.TB, node int) {
	t.Helper()
	checkRabbitMQ4Node(t, node)
	script := RepoPath(t, RabbitMQ4Script)
	if _, err := runRabbitMQ4(script, rabbitMQ4StopTimeout, "stop-node", fmt.Sprint(node)); err != nil {
		t.Fatalf("stopping RabbitMQ 4 node %d: %v", node, err)
	}
	t.Cleanup(func() {
		if _, err := runRabbitMQ4(script, rabbitMQ4StartTimeout, "start-node", fmt.Sprint(node)); err != nil {
			t.Errorf("starting RabbitMQ 4 node %d again after the test: %v", node, err)
		}
	})
}

// StartRabbitMQ4Node starts node (1, 2 or 3) again and returns once it is
// running and back in the cluster. Starting a running node does nothing.
func StartRabbitMQ4Node(t testing.TB, node int) {
	t.Helper()
	checkRabbitMQ4Node(t, node)
	if _, err := runRabbitMQ4(RepoPath(t, RabbitMQ4Script), rabbitMQ4StartTimeout, "start-node", fmt.Sprint(node)); err != nil {
		t.Fatalf("starting RabbitMQ 4 node %d: %v", node, err)
	}
}

func checkRabbitMQ4Node(t testing.TB, node int) {
	t.Helper()
	if node < 1 || node > 3 {
		t.Fatalf("RabbitMQ 4 node %d: the cluster has nodes 1, 2 and 3", node)
	}
}

// runRabbitMQ4 runs the script with args and returns its standard output;
// the error carries its standard error.
func runRabbitMQ4(script string, timeout time.Duration, args ...string) (string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, script, args...)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	// The script starts daemons; should one ever hold on to our pipes, do not
	// wait for it past the script's own exit.
	cmd.WaitDelay = 10 * time.Second
	err := cmd.Run()
	if ctx.Err() != nil {
		err = fmt.Errorf("timed out after %v: %w", timeout, err)
	}
	if err != nil {
		return stdout.String(), fmt.Errorf("%s %s: %w\nstderr:\n%s", script, strings.Join(args, " "), err, stderr.String())
	}
	return stdout.String(), nil
}
