package plog_test

import (
	"fmt"
	"time"

	"github.com/tally-billing/tally-openstack-collector/runtime/input/plog"
)

// A message of 11 bytes in fragments of 8: two datagrams, the tags on the last.
func ExampleFragments() {
	frags, err := plog.Fragments(7, []byte("hello, plog"), []string{"kt:nova"}, 8)
	if err != nil {
		panic(err)
	}
	for _, f := range frags {
		fmt.Printf("% x | %q\n", f[:24], f[24:])
	}
	// Output:
	// 00 01 00 02 00 00 00 08 00 00 00 07 00 00 00 0b 63 a4 1f 57 00 00 00 00 | "hello, p"
	// 00 01 00 02 00 01 00 08 00 00 00 07 00 00 00 0b 63 a4 1f 57 00 07 00 00 | "kt:novalog"
}

// Per-listener settings override the shared defaults field by field; what
// neither sets takes the package default.
func ExampleMerge() {
	shared := plog.Settings{DefragMaxAge: 5 * time.Second}
	mine := plog.Settings{AllowENVI: new(true), MaxConnections: 16}
	s := plog.Merge(mine, shared)
	fmt.Println(s.DefragMaxAge, s.DefragMaxBytes, *s.AllowENVI, *s.AllowKILL, s.MaxConnections, s.IdleTimeout)
	// Output: 5s 1048576 true false 16 1m0s
}
