// Package e2e holds the collector's end-to-end tests and its end-to-end
// benchmark, in _test.go files only: the built binary runs as a child
// process against the reference Reporting API (also a child process), a
// RabbitMQ virtual host of each test's own on the machine's broker (the TLS
// nodes and the RabbitMQ 4 cluster for the tests that need them), and the
// real oslo.messaging Notifier. The helpers they share with the other
// packages' tests are in internal/testkit; the harness of this package
// (harness_test.go) is what only these tests need.
package e2e
