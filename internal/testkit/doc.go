// Package testkit holds the helpers the project's tests share: what to do
// when a tool or a service a test needs is missing, the real RabbitMQ and a
// virtual host of a test's own on it, the lock that keeps broker restarts
// away from tests that count messages, waiting for a background reaction,
// running a Run method in the background until the test stops it,
// the compiled-module cache and the modules compiled into one, the test
// modules built by make test-wasm, delivering every event an outbox holds
// (DeliverAll) and reading every row of its ledger (WholeLedger); a
// benchmark's directory on the filesystem TALLY_OSC_BENCH_DIR names
// (BenchDir); directories and system users for tests that run clients as
// other users (PublicTempDir, SystemUser); and the three-node RabbitMQ 4
// cluster of .ci/rabbitmq4-cluster (RabbitMQ4Cluster, RabbitMQ4Ctl,
// StopRabbitMQ4Node, StartRabbitMQ4Node; see docs/broker.md, "A RabbitMQ 4
// cluster for tests").
//
// It is imported by _test.go files only. Nothing here mocks a part of the
// product: the helpers reach the real broker, the real files and the real
// tools.
//
// A missing tool or service fails the test and names the Debian package that
// provides it (make test installs them all through .ci/prepare). On a
// developer's machine that should not get those packages,
// TALLY_OSC_ALLOW_SKIP=1 turns these failures into skips, with the same
// message.
//
// WantAll fails a test for each text it expects that an output lacks, naming
// the output and the text.
package testkit
