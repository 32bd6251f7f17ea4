package outbox

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sync"
	"syscall"
)

// Modes of the outbox's directory and files, whatever the umask.
const (
	dirMode  fs.FileMode = 0o700
	fileMode fs.FileMode = 0o600
	// privateUmask is added to the process umask while an outbox is open.
	privateUmask = 0o077
)

// Badger offers no option for the mode of its files: its tables, memory
// tables, value logs and lock file are created 0666 (less the umask), from
// background goroutines as well as in Open (flushes, compactions, log
// rotation). The umask is the one thing that applies to every one of them, and
// it is a property of the process, not of a call: so it is tightened for as
// long as an outbox is open, not only around Open. The collector creates no
// other file, so the daemon loses nothing by it.
var umask struct {
	sync.Mutex
	users int
	saved int // the umask before the first outbox opened
	set   int // the umask set then
}

// tightenUmask adds privateUmask to the process umask until releaseUmask.
func tightenUmask() {
	umask.Lock()
	defer umask.Unlock()
	if umask.users == 0 {
		old := syscall.Umask(privateUmask)
		umask.saved, umask.set = old, old|privateUmask
		if umask.set != privateUmask {
			syscall.Umask(umask.set)
		}
	}
	umask.users++
}

// releaseUmask restores the umask when the last outbox closes, unless it was
// changed meanwhile by someone else.
func releaseUmask() {
	umask.Lock()
	defer umask.Unlock()
	umask.users--
	if umask.users > 0 {
		return
	}
	if cur := syscall.Umask(umask.saved); cur != umask.set {
		syscall.Umask(cur)
	}
}

// privateDir creates dir 0700 when missing, and narrows an existing one and
// the files in it (left by an earlier version, or copied in) to 0700 and
// 0600. A directory or file this process may not chmod (it belongs to
// another user, as a volume's mount point can) is reported in the returned
// warning; the directory is still used.
func privateDir(dir string) (warning error, err error) {
	if err := os.MkdirAll(dir, dirMode); err != nil {
		return nil, fmt.Errorf("outbox: create %s: %w", dir, err)
	}
	var warns []error
	narrow := func(path string, want fs.FileMode) {
		fi, err := os.Lstat(path)
		if err != nil || fi.Mode().Perm()&^want == 0 {
			return
		}
		if err := os.Chmod(path, fi.Mode().Perm()&want); err != nil {
			warns = append(warns, fmt.Errorf("%s is mode %04o and cannot be narrowed to %04o: %w", path, fi.Mode().Perm(), want, err))
		}
	}
	narrow(dir, dirMode)
	ents, err := os.ReadDir(dir)
	if err != nil {
		return nil, fmt.Errorf("outbox: read %s: %w", dir, err)
	}
	for _, e := range ents {
		if e.Type().IsRegular() {
			narrow(filepath.Join(dir, e.Name()), fileMode)
		}
	}
	return errors.Join(warns...), nil
}
