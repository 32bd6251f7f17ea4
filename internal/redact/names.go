package redact

import "github.com/tally-billing/tally-openstack-collector/wasm-sdk/secret"

// Marker replaces every hidden value: a credential-named member, a URL's
// password, a secret setting.
const Marker = "[redacted]"

// IsSecretName reports whether a name (a JSON member, an environment
// variable, a setting) looks like it holds a credential. The rule lives in
// wasm-sdk/secret, so that guest modules apply the same one; its
// documentation states it.
func IsSecretName(name string) bool { return secret.IsName(name) }
