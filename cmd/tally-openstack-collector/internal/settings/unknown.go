package settings

import (
	"fmt"
	"sort"
	"strings"
)

// notSettings are TALLY_OSC_ variables the program reads that are not rows of
// the table.
var notSettings = []string{EnvPrefix + "CONFIG"}

// unknownVariables answers a warning for every TALLY_OSC_* variable of
// environ that names no setting, with the closest one. A warning, not a
// refusal: an upgrade that renames or drops a setting leaves the old variable
// in unit files and pod specs, and one environment may serve several versions
// of the collector (docs/settings.md, "Unknown names"). The config file, which
// belongs to this program alone, refuses an unknown key instead.
func unknownVariables(environ []string) []string {
	seen := map[string]bool{}
	var out []string
	for _, kv := range environ {
		name, _, _ := strings.Cut(kv, "=")
		if !strings.HasPrefix(name, EnvPrefix) || seen[name] {
			continue
		}
		seen[name] = true
		if _, ok := settingByKey(strings.ToLower(strings.TrimPrefix(name, EnvPrefix))); ok && name == strings.ToUpper(name) {
			continue
		}
		known := false
		for _, n := range notSettings {
			known = known || n == name
		}
		if known {
			continue
		}
		out = append(out, name+" is not a setting and is ignored; "+closestHint(name, envNames()))
	}
	sort.Strings(out)
	return out
}

// unknownKey is the problem of a config file key that names no setting.
func unknownKey(path, key string) string {
	keys := make([]string, 0, len(table)+1)
	for _, s := range table {
		keys = append(keys, s.key)
	}
	return fmt.Sprintf("%s: unknown setting %q; %s", path, key, closestHint(key, append(keys, "plog")))
}

func envNames() []string {
	out := make([]string, 0, len(table)+len(notSettings))
	for _, s := range table {
		out = append(out, s.env())
	}
	return append(out, notSettings...)
}

// closestHint names the candidate nearest to name by edit distance: "did you
// mean X?" when it is a likely misspelling, otherwise only the nearest, with
// where the list is.
//
//	closestHint("TALLY_OSC_PREFECH", envNames()) // did you mean TALLY_OSC_PREFETCH?
func closestHint(name string, candidates []string) string {
	best, bestD := "", -1
	for _, c := range candidates {
		d := editDistance(strings.ToUpper(name), strings.ToUpper(c))
		if bestD < 0 || d < bestD {
			best, bestD = c, d
		}
	}
	// A misspelling: a few edits, and fewer than a third of the name.
	if bestD <= 3 && bestD*3 <= len(name) {
		return "did you mean " + best + "?"
	}
	return "no setting is close (the nearest is " + best + "); docs/settings.md lists them"
}

// editDistance is the Levenshtein distance of a and b: the fewest single-byte
// insertions, deletions and substitutions that turn one into the other.
func editDistance(a, b string) int {
	prev := make([]int, len(b)+1)
	cur := make([]int, len(b)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(a); i++ {
		cur[0] = i
		for j := 1; j <= len(b); j++ {
			cost := 1
			if a[i-1] == b[j-1] {
				cost = 0
			}
			cur[j] = min(prev[j]+1, cur[j-1]+1, prev[j-1]+cost)
		}
		prev, cur = cur, prev
	}
	return prev[len(b)]
}
