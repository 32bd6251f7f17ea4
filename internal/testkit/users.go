package testkit

import (
	"errors"
	"os"
	"os/exec"
	"os/user"
	"strconv"
	"testing"
)

// PublicTempDir makes a directory that every user may enter (mode 0755),
// named pattern followed by a random part under the system's temporary
// directory, and removes it when the test ends. It holds what a test's
// other users must reach, such as a Unix socket; t.TempDir lies under a
// directory they may not enter.
func PublicTempDir(tb testing.TB, pattern string) string {
	tb.Helper()
	d, err := os.MkdirTemp("", pattern)
	if err != nil {
		tb.Fatal(err)
	}
	if err := os.Chmod(d, 0o755); err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { os.RemoveAll(d) })
	return d
}

// SystemUser answers the user and group ids of the system user name,
// creating it with useradd (no home, no login shell, a group of its own)
// if it does not exist; an existing one is used as it is, and one another
// test creates meanwhile is no error.
func SystemUser(tb testing.TB, name string) (uid, gid uint32) {
	tb.Helper()
	if _, err := user.Lookup(name); err != nil {
		useradd := LookPath(tb, "useradd", "passwd")
		out, err := exec.Command(useradd, "--system", "--no-create-home", "--user-group", "--shell", "/usr/sbin/nologin", name).CombinedOutput()
		// 9: the name exists (created meanwhile).
		var ee *exec.ExitError
		if err != nil && !(errors.As(err, &ee) && ee.ExitCode() == 9) {
			tb.Fatalf("useradd %s: %v\n%s", name, err, out)
		}
	}
	u, err := user.Lookup(name)
	if err != nil {
		tb.Fatal(err)
	}
	id, err := strconv.ParseUint(u.Uid, 10, 32)
	if err != nil {
		tb.Fatalf("user %s: uid %q: %v", name, u.Uid, err)
	}
	group, err := strconv.ParseUint(u.Gid, 10, 32)
	if err != nil {
		tb.Fatalf("user %s: gid %q: %v", name, u.Gid, err)
	}
	return uint32(id), uint32(group)
}
