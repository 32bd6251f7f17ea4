package runtime

import (
	"encoding/json"
	"errors"
	"fmt"
	"strings"
)

// Manifest describes a mapper module, as its tally_manifest export answers it.
type Manifest struct {
	Name       string   `json:"name"`
	Version    string   `json:"version"`
	EventTypes []string `json:"event_types"`
	Releases   []string `json:"releases"`
}

// ParseManifest decodes and validates a manifest document, as a module's
// tally_manifest answers it or as the build records it beside a built-in
// module (mappers.Manifests). The checks are those of Load.
func ParseManifest(b []byte) (Manifest, error) { return parseManifest(b) }

// MarshalManifest encodes mf as the build records it beside a built-in
// module: one JSON object and a newline.
func MarshalManifest(mf Manifest) ([]byte, error) {
	b, err := json.Marshal(mf)
	if err != nil {
		return nil, fmt.Errorf("encode manifest: %w", err)
	}
	return append(b, '\n'), nil
}

// parseManifest decodes and validates a manifest document.
func parseManifest(b []byte) (Manifest, error) {
	var mf Manifest
	d := json.NewDecoder(strings.NewReader(string(b)))
	if err := d.Decode(&mf); err != nil {
		return Manifest{}, fmt.Errorf("manifest is not a JSON object: %w", err)
	}
	if d.More() {
		return Manifest{}, errors.New("manifest has data after the object")
	}
	return mf, mf.validate()
}

// ID is "name@version", the module's name in events' source.mapper, logs
// and metrics.
func (mf Manifest) ID() string { return mf.Name + "@" + mf.Version }

func (mf Manifest) validate() error {
	var errs []error
	if mf.Name == "" {
		errs = append(errs, errors.New("name is empty"))
	}
	for _, c := range mf.Name {
		if !(c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '_' || c == '-') {
			errs = append(errs, fmt.Errorf("name %q: only a-z, 0-9, '_' and '-' are allowed", mf.Name))
			break
		}
	}
	if !isSemver(mf.Version) {
		errs = append(errs, fmt.Errorf("version %q is not a semantic version", mf.Version))
	}
	include := 0
	for _, g := range mf.EventTypes {
		pat := strings.TrimPrefix(g, "!")
		if pat == "" {
			errs = append(errs, fmt.Errorf("event_types: empty pattern %q", g))
		}
		if !strings.HasPrefix(g, "!") {
			include++
		}
	}
	if include == 0 {
		errs = append(errs, errors.New("event_types claims nothing (no include pattern)"))
	}
	return errors.Join(errs...)
}

// isSemver accepts MAJOR.MINOR.PATCH with an optional -pre-release and +build.
func isSemver(v string) bool {
	if i := strings.IndexByte(v, '+'); i >= 0 {
		if !dotIdents(v[i+1:]) {
			return false
		}
		v = v[:i]
	}
	if i := strings.IndexByte(v, '-'); i >= 0 {
		if !dotIdents(v[i+1:]) {
			return false
		}
		v = v[:i]
	}
	parts := strings.Split(v, ".")
	if len(parts) != 3 {
		return false
	}
	for _, p := range parts {
		if p == "" || (len(p) > 1 && p[0] == '0') {
			return false
		}
		for _, c := range p {
			if c < '0' || c > '9' {
				return false
			}
		}
	}
	return true
}

func dotIdents(s string) bool {
	for _, p := range strings.Split(s, ".") {
		if p == "" {
			return false
		}
		for _, c := range p {
			if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '-') {
				return false
			}
		}
	}
	return true
}

// Match reports whether the manifest claims eventType: it matches at least one
// include glob and no exclude glob ('!' prefix). In a glob '*' matches any run of
// characters, dots included. specificity is the number of literal characters of
// the longest matching include glob, so that a router can prefer the most
// specific claim.
//
//	mf := Manifest{EventTypes: []string{"compute.instance.*", "!compute.instance.*.start"}}
//	mf.Match("compute.instance.create.end")   // true, 17
//	mf.Match("compute.instance.create.start") // false, 0
func (mf Manifest) Match(eventType string) (ok bool, specificity int) {
	best := -1
	for _, g := range mf.EventTypes {
		if strings.HasPrefix(g, "!") {
			if glob(g[1:], eventType) {
				return false, 0
			}
			continue
		}
		if glob(g, eventType) {
			if lit := len(g) - strings.Count(g, "*"); lit > best {
				best = lit
			}
		}
	}
	if best < 0 {
		return false, 0
	}
	return true, best
}

// glob matches s against pattern where '*' matches any run of bytes.
func glob(pattern, s string) bool {
	px, sx := 0, 0
	nextPx, nextSx := -1, -1
	for px < len(pattern) || sx < len(s) {
		if px < len(pattern) {
			if c := pattern[px]; c == '*' {
				nextPx, nextSx = px, sx+1
				px++
				continue
			} else if sx < len(s) && s[sx] == c {
				px++
				sx++
				continue
			}
		}
		if nextPx >= 0 && nextSx <= len(s) {
			px, sx = nextPx, nextSx
			continue
		}
		return false
	}
	return true
}
