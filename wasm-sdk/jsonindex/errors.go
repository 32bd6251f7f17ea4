package jsonindex

import "errors"

var (
	// ErrSyntax reports input that is not a single valid JSON document.
	ErrSyntax = errors.New("jsonindex: syntax error")
	// ErrDepth reports objects or arrays nested deeper than MaxDepth.
	ErrDepth = errors.New("jsonindex: nesting too deep")
)
