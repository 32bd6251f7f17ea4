// Package mappers ships the built-in mapper modules inside the collector's
// binary.
//
// The modules are built from mappers/<service> (nova, cinder, neutron,
// glance, octavia, manila, designate, swift, trove, ironic), one WebAssembly
// module per OpenStack service, and from mappers/channel, the module of the
// local message channel's generic usage messages (docs/channel.md); all are
// in MAPPER_NAMES in mappers.mk. `make` builds them into
// mappers/dist/<name>.wasm, and records beside each the manifest it answers
// (<name>.manifest.json, by internal/recordmanifest; Manifests), so the
// catalogue knows what a built-in claims without compiling it; this package
// embeds that directory, so a
// binary built with `make build` needs no file beside it. A binary built
// without the modules (plain `go build` on a fresh clone) still compiles and
// answers Builtin with ErrMissing.
//
// The package never imports the guest SDK and holds no state: Builtin reads
// the embedded files on each call and is safe for concurrent use.
//
// # Layout below mappers/
//
//	<service>/main.go       the mapper (package main, guest side, SDK only; the
//	                        helpers they all share are the SDK's wasm-sdk/openstack)
//	<service>/golden_test.go a few lines handing the mapper to fixture.Golden
//	<service>/testdata/     fixture pairs <case>.in.json -> <case>.out.json and PROVENANCE.tsv
//	testdata/envelope/      AMQP bodies and the events the pipeline must make of them
//	testdata/unclaimed/     real samples of types no built-in mapper claims
//	testdata/worked-example/ the example of docs/writing-mappers.md
//	dist/                   the built modules and their manifests (make), embedded here
//	internal/recordmanifest the build's step that records a module's manifest
//
// The contract of the events is docs/events.md; how to adapt a mapper to a
// release is docs/writing-mappers.md.
package mappers
