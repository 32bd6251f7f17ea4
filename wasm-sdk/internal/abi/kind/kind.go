// Package kind is the one table of the kind numbers of ABI v1: what the
// field and fields imports answer in bits 63..56 (docs/abi.md, "field").
// jsonindex.Kind (the host's and the native stubs'), the SDK's Kind (the
// guest's) and package abi take their numbers from it; it imports nothing,
// so the host's indexer and a guest both link it at no cost. (A C guest's
// header, examples/c-mapper/src/tally.h, keeps its own copy, which a test
// holds to docs/abi.md together with this table.)
package kind

// The kinds, numbered as in docs/abi.md.
const (
	Missing = 0
	Null    = 1
	String  = 2
	Number  = 3
	True    = 4
	False   = 5
	Object  = 6
	Array   = 7
)
