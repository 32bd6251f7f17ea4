package testkit

import (
	"os"
	"os/user"
	"strconv"
	"testing"
)

// A public temporary directory has mode 0755 and is gone when its test
// ends.
func TestPublicTempDirIsOpenToAllAndRemoved(t *testing.T) {
	var dir string
	t.Run("inner", func(t *testing.T) {
		dir = PublicTempDir(t, "tally-testkit-public-")
		fi, err := os.Stat(dir)
		if err != nil {
			t.Fatal(err)
		}
		if !fi.IsDir() || fi.Mode().Perm() != 0o755 {
			t.Fatalf("%s: mode %v, want a directory with 0755", dir, fi.Mode())
		}
	})
	if _, err := os.Stat(dir); !os.IsNotExist(err) {
		t.Fatalf("%s after its test: %v, want it removed", dir, err)
	}
}

// SystemUser answers the ids of an existing user as they are: here the user
// the test runs as, which it does not create.
func TestSystemUserAnswersAnExistingUser(t *testing.T) {
	u, err := user.Current()
	if err != nil {
		t.Fatal(err)
	}
	uid, gid := SystemUser(t, u.Username)
	if strconv.FormatUint(uint64(uid), 10) != u.Uid || strconv.FormatUint(uint64(gid), 10) != u.Gid {
		t.Fatalf("SystemUser(%s) = %d, %d, want %s, %s", u.Username, uid, gid, u.Uid, u.Gid)
	}
}
