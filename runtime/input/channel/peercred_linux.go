package channel

import (
	"fmt"
	"net"
	"unsafe"

	"golang.org/x/sys/unix"
)

// peerCred is who is at the other end of a connection, as the kernel
// recorded it when the peer connected.
type peerCred struct {
	uid, gid uint32
	pid      int32
	groups   []uint32 // supplementary groups (SO_PEERGROUPS), the primary one not repeated
}

func (c peerCred) inGroup(gid uint32) bool {
	if c.gid == gid {
		return true
	}
	for _, g := range c.groups {
		if g == gid {
			return true
		}
	}
	return false
}

// readPeerCred reads SO_PEERCRED and SO_PEERGROUPS from a Unix socket.
func readPeerCred(c *net.UnixConn) (peerCred, error) {
	raw, err := c.SyscallConn()
	if err != nil {
		return peerCred{}, err
	}
	var pc peerCred
	var serr error
	err = raw.Control(func(fd uintptr) {
		var uc *unix.Ucred
		uc, serr = unix.GetsockoptUcred(int(fd), unix.SOL_SOCKET, unix.SO_PEERCRED)
		if serr != nil {
			return
		}
		pc = peerCred{uid: uc.Uid, gid: uc.Gid, pid: uc.Pid}
		pc.groups = peerGroups(int(fd), uc.Gid)
	})
	if err == nil {
		err = serr
	}
	if err != nil {
		return peerCred{}, fmt.Errorf("channel: read peer credentials: %w", err)
	}
	return pc, nil
}

// peerGroups reads SO_PEERGROUPS (Linux 4.13 and later). A kernel without
// it leaves the primary group only.
func peerGroups(fd int, primary uint32) []uint32 {
	buf := make([]uint32, 64)
	for range 3 {
		n := uint32(len(buf) * 4) //nolint:gosec // G115: 64 groups of 4 bytes
		_, _, errno := unix.Syscall6(unix.SYS_GETSOCKOPT, uintptr(fd), unix.SOL_SOCKET, unix.SO_PEERGROUPS,
			uintptr(unsafe.Pointer(&buf[0])), uintptr(unsafe.Pointer(&n)), 0) //nolint:gosec // G103: getsockopt(SO_PEERGROUPS), which x/sys/unix does not wrap, writes into buf and n, which outlive the call
		switch errno {
		case 0:
			out := make([]uint32, 0, n/4)
			for _, g := range buf[:n/4] {
				if g != primary {
					out = append(out, g)
				}
			}
			return out
		case unix.ERANGE:
			buf = make([]uint32, n/4+1)
		default:
			return nil
		}
	}
	return nil
}
