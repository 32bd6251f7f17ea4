//go:build !wasip1

package abi

import "errors"

// ErrBudget is the panic value of a lookup past the Budget of the native
// host (the guest build has no such budget: the collector meters it).
var ErrBudget = errors.New("lookup budget of the native call exhausted")
