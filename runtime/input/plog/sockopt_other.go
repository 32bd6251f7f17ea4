//go:build !linux

package plog

import "net"

func setReadBuffer(c *net.UDPConn, n int) {
	if n > 0 {
		_ = c.SetReadBuffer(n)
	}
}

func readBufferBytes(c *net.UDPConn) int { return 0 }

func enableDropCount(c *net.UDPConn) {}

func parseDropCount(oob []byte) (uint32, bool) { return 0, false }
