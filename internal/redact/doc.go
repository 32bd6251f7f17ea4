// Package redact is the one redaction policy of the collector: which names
// hold credentials, the one marker that replaces their values, and the
// redactors built on them (JSON documents, including JSON held in strings;
// URLs carrying a password; environment variables).
//
// Every place that shows data an operator did not write themselves (the dump,
// the dead-letter view, plog's ENVI answer, the effective settings in the log,
// the credential leak check of mapper fixtures) goes through this package, so
// they all hide the same things the same way.
//
// # Names
//
// IsSecretName decides which names hold credentials. The rule itself lives in
// wasm-sdk/secret, whose documentation states it: guest modules, which may
// import only the SDK, apply the same rule to what they copy into an event
// (the channel module), so there is one list, not two.
//
// # Cut bodies
//
// The JSON redactor reads bodies that may have been cut, so it reads a string
// leniently (UnquoteLenient): a missing closing quote ends it at the end of the
// body, and a malformed escape keeps its character. The decoding itself is
// wasm-sdk/jsonstr's, in its KeepChar mode; this package adds only where the
// string ends.
//
// # The marker
//
// Marker, "[redacted]", replaces a hidden value everywhere.
package redact
