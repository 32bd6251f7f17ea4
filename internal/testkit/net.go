package testkit

import (
	"net"
	"testing"
)

// FreeAddr answers a loopback TCP address that was free a moment ago, for a
// child process to listen on.
func FreeAddr(tb testing.TB) string {
	tb.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		tb.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().String()
}
