//go:build linux

package plog

import (
	"encoding/binary"
	"net"
	"syscall"
)

// setReadBuffer asks for a receive buffer of n bytes. SO_RCVBUFFORCE (root or
// CAP_NET_ADMIN) may exceed net.core.rmem_max; otherwise SO_RCVBUF is capped by
// it.
func setReadBuffer(c *net.UDPConn, n int) {
	if n <= 0 {
		return
	}
	rc, err := c.SyscallConn()
	if err != nil {
		return
	}
	var forced bool
	_ = rc.Control(func(fd uintptr) {
		forced = syscall.SetsockoptInt(int(fd), syscall.SOL_SOCKET, syscall.SO_RCVBUFFORCE, n) == nil
	})
	if !forced {
		_ = c.SetReadBuffer(n)
	}
}

// readBufferBytes reports the kernel's receive buffer size (the kernel doubles
// the asked value for its bookkeeping).
func readBufferBytes(c *net.UDPConn) int {
	rc, err := c.SyscallConn()
	if err != nil {
		return 0
	}
	var n int
	_ = rc.Control(func(fd uintptr) {
		n, _ = syscall.GetsockoptInt(int(fd), syscall.SOL_SOCKET, syscall.SO_RCVBUF)
	})
	return n
}

// enableDropCount asks the kernel to attach, to each datagram received after a
// drop, the number of datagrams this socket dropped for want of buffer space.
func enableDropCount(c *net.UDPConn) {
	rc, err := c.SyscallConn()
	if err != nil {
		return
	}
	_ = rc.Control(func(fd uintptr) {
		_ = syscall.SetsockoptInt(int(fd), syscall.SOL_SOCKET, syscall.SO_RXQ_OVFL, 1)
	})
}

// parseDropCount reads the SO_RXQ_OVFL control message without allocating.
func parseDropCount(oob []byte) (uint32, bool) {
	const hdr = syscall.SizeofCmsghdr
	for len(oob) >= hdr {
		var length int
		if hdr == 16 {
			length = int(binary.NativeEndian.Uint64(oob[0:8]))
		} else {
			length = int(binary.NativeEndian.Uint32(oob[0:4]))
		}
		level := int32(binary.NativeEndian.Uint32(oob[hdr-8 : hdr-4]))
		typ := int32(binary.NativeEndian.Uint32(oob[hdr-4 : hdr]))
		if length < hdr || length > len(oob) {
			return 0, false
		}
		if level == syscall.SOL_SOCKET && typ == syscall.SO_RXQ_OVFL && length >= hdr+4 {
			return binary.NativeEndian.Uint32(oob[hdr : hdr+4]), true
		}
		next := (length + 7) &^ 7
		if hdr == 12 {
			next = (length + 3) &^ 3
		}
		if next > len(oob) {
			return 0, false
		}
		oob = oob[next:]
	}
	return 0, false
}
