package testkit

import (
	"errors"
	"os"
	"strconv"
	"strings"
	"syscall"
)

// ProcessGone reports whether the process pid has exited, or is a zombie
// waiting for its parent to reap it (a process another process started, as
// the daemon starts its watchdog process).
func ProcessGone(pid int) bool {
	if err := syscall.Kill(pid, 0); errors.Is(err, syscall.ESRCH) {
		return true
	}
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return true
	}
	// pid (comm) state ...: the state follows the last ')'.
	s := string(b)
	if i := strings.LastIndexByte(s, ')'); i >= 0 && i+2 < len(s) {
		return s[i+2] == 'Z' || s[i+2] == 'X'
	}
	return false
}
