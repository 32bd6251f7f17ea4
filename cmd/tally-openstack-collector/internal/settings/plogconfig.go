package settings

import (
	"fmt"
	"reflect"
	"strings"
	"unicode"

	"github.com/go-viper/mapstructure/v2"
	"github.com/knadh/koanf/providers/confmap"
	"github.com/knadh/koanf/v2"

	"github.com/tally-billing/tally-openstack-collector/runtime/input/plog"
)

// PlogListener is one plog-compatible input: the address from plog_listeners
// and the details from the config file's plog section. cmd only carries them;
// fields left zero (nil for the switches) take plog.defaults, then the plog
// package's own defaults.
type PlogListener struct {
	// Address is udp://host:port or tcp://host:port.
	Address string
	// Mappers names the modules (manifest name) of the listener's chain, in
	// order; empty: messages are treated as notifications or canonical events.
	Mappers  []string
	Settings plog.Settings
}

// decodePlog builds one PlogListener per active address: the addresses of
// plog_listeners, or when that is empty the addresses of the file's
// plog.listeners entries. It also returns plog.defaults.
func decodePlog(active []string, section map[string]any) ([]PlogListener, plog.Settings, []string) {
	var problems []string
	var defaults plog.Settings
	entries := map[string]map[string]any{}
	var order []string
	decode := func(where string, m map[string]any, out *plog.Settings) {
		clean := map[string]any{}
		for k, v := range m {
			switch {
			case k == "address" || k == "mappers":
			case !plogKeys()[k]:
				problems = append(problems, fmt.Sprintf("%s: unknown key %q", where, k))
			default:
				clean[k] = v
			}
		}
		if err := decodeStruct(clean, out); err != nil {
			problems = append(problems, fmt.Sprintf("%s: %s", where, plogDecodeError(err)))
		}
		if negativeField(reflect.ValueOf(*out)) {
			problems = append(problems, fmt.Sprintf("%s: sizes, counts and durations must not be negative", where))
		}
	}
	if section != nil {
		for key := range section {
			if key != "defaults" && key != "listeners" {
				problems = append(problems, fmt.Sprintf("plog: unknown key %q (want defaults, listeners)", key))
			}
		}
		if d, ok := section["defaults"]; ok {
			dm, ok := d.(map[string]any)
			if !ok {
				problems = append(problems, "plog.defaults must be a mapping")
			}
			if _, has := dm["mappers"]; has {
				problems = append(problems, "plog.defaults: mappers belong to a listener")
			}
			decode("plog.defaults", dm, &defaults)
		}
		if l, ok := section["listeners"]; ok {
			list, ok := l.([]any)
			if !ok {
				problems = append(problems, "plog.listeners must be a list")
			}
			for i, e := range list {
				em, ok := e.(map[string]any)
				if !ok {
					problems = append(problems, fmt.Sprintf("plog.listeners[%d] must be a mapping", i))
					continue
				}
				addr, _ := em["address"].(string)
				if addr == "" {
					problems = append(problems, fmt.Sprintf("plog.listeners[%d]: address is required", i))
					continue
				}
				if _, dup := entries[addr]; dup {
					problems = append(problems, fmt.Sprintf("plog.listeners: %s listed twice", addr))
					continue
				}
				entries[addr] = em
				order = append(order, addr)
			}
		}
	}
	if len(active) == 0 {
		active = order
		for _, a := range active {
			if err := checkListenAddr(a); err != nil {
				problems = append(problems, fmt.Sprintf("plog.listeners: %q: %v", a, err))
			}
		}
	}
	var out []PlogListener
	seen := map[string]bool{}
	for _, addr := range active {
		if seen[addr] {
			problems = append(problems, fmt.Sprintf("plog listener %s listed twice", addr))
			continue
		}
		seen[addr] = true
		l := PlogListener{Address: addr}
		if e, ok := entries[addr]; ok {
			decode("plog listener "+addr, e, &l.Settings)
			if m, ok := e["mappers"]; ok {
				l.Mappers = splitList(fileValue(m))
			}
		}
		out = append(out, l)
	}
	for _, addr := range order {
		if !seen[addr] {
			problems = append(problems, fmt.Sprintf("plog.listeners: %s is not in %sPLOG_LISTENERS", addr, EnvPrefix))
		}
	}
	return out, defaults, problems
}

// decodeStruct decodes a YAML mapping into a struct whose field names, in
// snake case, are the keys (ReadBufferBytes: read_buffer_bytes), with
// durations as text ("10s").
func decodeStruct(m map[string]any, out any) error {
	k := koanf.New(".")
	if err := k.Load(confmap.Provider(m, ""), nil); err != nil {
		return err
	}
	return k.UnmarshalWithConf("", out, koanf.UnmarshalConf{Tag: "koanf", DecoderConfig: &mapstructure.DecoderConfig{
		DecodeHook:       mapstructure.StringToTimeDurationHookFunc(),
		MatchName:        func(key, field string) bool { return key == snakeCase(field) },
		Result:           out,
		WeaklyTypedInput: true,
	}})
}

// plogKeys are the keys of a plog listener's settings in the config file: the
// fields of plog.Settings in snake case, so a new plog setting needs no change
// here.
func plogKeys() map[string]bool {
	t := reflect.TypeFor[plog.Settings]()
	keys := make(map[string]bool, t.NumField())
	for i := range t.NumField() {
		keys[snakeCase(t.Field(i).Name)] = true
	}
	return keys
}

// snakeCase turns a Go field name into its config key: DefragMaxAge is
// defrag_max_age, AllowENVI is allow_envi.
func snakeCase(name string) string {
	var b strings.Builder
	rs := []rune(name)
	for i, r := range rs {
		upper := unicode.IsUpper(r)
		if upper && i > 0 && (unicode.IsLower(rs[i-1]) || (i+1 < len(rs) && unicode.IsLower(rs[i+1]) && unicode.IsUpper(rs[i-1]))) {
			b.WriteByte('_')
		}
		b.WriteRune(unicode.ToLower(r))
	}
	return b.String()
}

// negativeField reports whether any whole-number or duration field of the
// struct v is below zero.
func negativeField(v reflect.Value) bool {
	for i := range v.NumField() {
		f := v.Field(i)
		switch f.Kind() {
		case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64:
			if f.Int() < 0 {
				return true
			}
		}
	}
	return false
}

// plogDecodeError words a decoding error with the config keys instead of the
// Go field names.
func plogDecodeError(err error) string {
	msg := err.Error()
	msg = strings.TrimPrefix(msg, "decoding failed due to the following error(s):\n\n")
	t := reflect.TypeFor[plog.Settings]()
	for i := range t.NumField() {
		name := t.Field(i).Name
		msg = strings.ReplaceAll(msg, "'"+name+"'", snakeCase(name))
	}
	return strings.ReplaceAll(msg, "\n", "; ")
}
