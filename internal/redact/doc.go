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
// IsSecretName decides, case-insensitively, on the parts of a name (split at
// '_', '-', '.', spaces and lower-to-upper case changes, so auth_token,
// X-Auth-Token and authToken split alike):
//
//   - the name contains password, passwd, passphrase, token, secret,
//     credential, cookie or connection_info anywhere (auth_password,
//     _context_auth_token, PGPASSWORD, client_secret, Set-Cookie);
//   - a part is pass or pwd (adminPass, DB_PWD);
//   - a part is privatekey, apikey or accesskey, or is key after another part
//     (private_key, api_key, SSH_KEY, AWS_ACCESS_KEY_ID), except routing_key
//     and sort_key, which name no secret (a routing key is in every event's
//     source); key alone or first (key, key_name) is not a credential;
//   - the last part is auth or authorization (Authorization, basic_auth);
//     auth elsewhere is not (auth_algorithm, auth_url).
//
// The rule goes by parts rather than by exact names because services spell the
// same credential many ways; it errs on the side of hiding.
//
// # The marker
//
// Marker, "[redacted]", replaces a hidden value everywhere.
package redact
