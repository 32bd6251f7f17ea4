package mappers_test

import (
	"context"
	"fmt"
	"sort"

	"github.com/rs/zerolog"

	"github.com/tally-billing/tally-openstack-collector/mappers"
	"github.com/tally-billing/tally-openstack-collector/runtime"
)

// Load the built-in modules into an engine, in a stable order, under the
// names the collector gives them.
func ExampleBuiltin() {
	ctx := context.Background()
	wasm, err := mappers.Builtin()
	if err != nil {
		fmt.Println(err) // built-in mappers missing: run make
		return
	}
	eng, err := runtime.NewEngine(ctx, runtime.Config{Logger: zerolog.Nop()})
	if err != nil {
		fmt.Println(err)
		return
	}
	defer eng.Close(ctx)
	names := make([]string, 0, len(wasm))
	for name := range wasm {
		names = append(names, name)
	}
	sort.Strings(names)
	for _, name := range names {
		m, err := eng.Load(ctx, "builtin:"+name, wasm[name])
		if err != nil {
			fmt.Println(err)
			return
		}
		fmt.Println(m.ID(), m.Manifest().EventTypes)
	}
}
