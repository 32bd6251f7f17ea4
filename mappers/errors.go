package mappers

import "errors"

// ErrMissing is returned by Builtin when the binary was built without the
// modules.
var ErrMissing = errors.New("built-in mappers missing: run make")
