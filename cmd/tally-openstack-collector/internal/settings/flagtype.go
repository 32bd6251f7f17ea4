package settings

import (
	"regexp"
	"time"

	"github.com/spf13/pflag"
)

// typedFlag is a setting's flag: its value is held as text, as every
// setting's is (Load decodes it with the environment's and the file's), and
// Type names the kind of value it takes, which --help shows.
type typedFlag struct {
	pflag.Value
	typ string
}

func (f typedFlag) Type() string { return f.typ }

var (
	decimal = regexp.MustCompile(`^(0|[1-9][0-9]*)$`)
	octal   = regexp.MustCompile(`^0[0-7]+$`)
)

// flagType is the kind of value the setting takes, as --help names it:
// int, octal (a file mode), duration, list or string.
func (s setting) flagType() string {
	if len(s.oneOf) > 0 {
		return "string"
	}
	if s.parse != nil {
		// Its own decoder: a whole number when its default is one, a file
		// mode when it is written as one.
		switch {
		case decimal.MatchString(s.def):
			return "int"
		case octal.MatchString(s.def):
			return "octal"
		}
		return "string"
	}
	switch s.field(&Config{}).(type) {
	case *int, *int64:
		return "int"
	case *time.Duration:
		return "duration"
	case *[]string:
		return "list"
	}
	return "string"
}

// typeFlag names the kind of value of the setting's flag on fs.
func typeFlag(fs *pflag.FlagSet, s setting) {
	if t := s.flagType(); t != "string" {
		if fl := fs.Lookup(s.flag()); fl != nil {
			fl.Value = typedFlag{Value: fl.Value, typ: t}
		}
	}
}
