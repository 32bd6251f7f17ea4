package cli

import "errors"

// errUsage marks a command line the usage text was printed for.
var errUsage = errors.New("usage")
