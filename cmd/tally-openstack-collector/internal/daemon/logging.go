package daemon

import (
	"io"
	"os"
	"time"

	"github.com/mattn/go-isatty"
	"github.com/rs/zerolog"

	"github.com/tally-billing/tally-openstack-collector/cmd/tally-openstack-collector/internal/settings"
	"github.com/tally-billing/tally-openstack-collector/internal/tokenfile"
)

// ConfigureLogging sets what zerolog keeps process-wide: a duration field
// (retry_in, took, wait ...) is written as Go writes a duration, its unit in
// it ("1.5s", "250ms", "2m0s"), where zerolog's default is a bare number of
// milliseconds. The program calls it once, before anything logs
// (zerolog's settings are plain variables, read by every logging goroutine).
func ConfigureLogging() {
	zerolog.DurationFieldFormat = zerolog.DurationFormatString
}

// NewLogger returns the base logger (ConfigureLogging first): JSON lines, or the console format when
// format is "console", or "auto" and w is a terminal. It carries no component:
// every user adds its own with component(), so each line has exactly one.
func NewLogger(w io.Writer, format string, level zerolog.Level) zerolog.Logger {
	if format == "console" || (format == "auto" && isTerminal(w)) {
		w = zerolog.ConsoleWriter{Out: w, TimeFormat: time.RFC3339}
	}
	return zerolog.New(w).Level(level).With().Timestamp().Logger()
}

func isTerminal(w io.Writer) bool {
	f, ok := w.(*os.File)
	return ok && (isatty.IsTerminal(f.Fd()) || isatty.IsCygwinTerminal(f.Fd()))
}

// component tags a logger for one package or part of the daemon.
func component(base zerolog.Logger, name string) zerolog.Logger {
	return base.With().Str("component", name).Logger()
}

// WarnSettings logs at start what the settings hold that is suspicious but
// does not stop it: cfg.Warnings (an unknown TALLY_OSC_* variable, a drop-in
// directory not there yet), and every private key file that group or others
// may read, by the rule of the token files (tokenfile.WarnExposed).
func WarnSettings(cfg *settings.Config, log zerolog.Logger) {
	for _, w := range cfg.Warnings() {
		log.Warn().Msg(w)
	}
	for _, k := range cfg.KeyFiles() {
		tokenfile.WarnExposed(log, "TLS private key file", k.Setting, k.Path)
	}
}
