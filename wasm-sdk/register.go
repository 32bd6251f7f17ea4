package sdk

import (
	"github.com/tally-billing/tally-openstack-collector/wasm-sdk/internal/abi"
	"github.com/tally-billing/tally-openstack-collector/wasm-sdk/jsonstr"
)

// registered is the module's one mapping, set by Register during package
// initialisation and read-only afterwards. A guest module is single-threaded:
// the host never calls into one instance concurrently.
var registered struct {
	manifest []byte // the tally_manifest document
	f        MapFunc
}

// Register installs the module's manifest and mapping function. Call it once,
// from the mapper's init(): a reactor module runs package initialisation when
// the host instantiates it, never main. It panics on a second call, a nil f,
// or a manifest without a name, version or event type; the host then refuses
// the module at load, naming the reason.
func Register(m Manifest, f MapFunc) {
	switch {
	case registered.f != nil:
		panic("sdk: Register called twice")
	case f == nil:
		panic("sdk: Register with a nil MapFunc")
	case !validName(m.Name):
		panic("sdk: manifest name must match [a-z0-9_-]+")
	case m.Version == "":
		panic("sdk: manifest version is empty")
	case len(m.EventTypes) == 0:
		panic("sdk: manifest claims no event types")
	}
	registered.manifest = appendManifest(nil, m)
	registered.f = f
}

func validName(s string) bool {
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !(c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '_' || c == '-') {
			return false
		}
	}
	return s != ""
}

// appendManifest writes m as the manifest JSON document of docs/abi.md.
func appendManifest(dst []byte, m Manifest) []byte {
	dst = append(dst, `{"name":`...)
	dst = jsonstr.AppendQuoted(dst, m.Name)
	dst = append(dst, `,"version":`...)
	dst = jsonstr.AppendQuoted(dst, m.Version)
	dst = append(dst, `,"event_types":`...)
	dst = appendStrings(dst, m.EventTypes)
	dst = append(dst, `,"releases":`...)
	dst = appendStrings(dst, m.Releases)
	return append(dst, '}')
}

func appendStrings(dst []byte, ss []string) []byte {
	dst = append(dst, '[')
	for i, s := range ss {
		if i > 0 {
			dst = append(dst, ',')
		}
		dst = jsonstr.AppendQuoted(dst, s)
	}
	return append(dst, ']')
}

// Log writes msg to the collector's log, tagged with the module. The host
// rate-limits guest logs; keep them for the unusual. Natively (go test) the
// line goes to standard error.
func Log(level Level, msg string) { abi.Log(int32(level), msg) }
