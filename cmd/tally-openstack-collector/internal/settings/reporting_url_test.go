package settings

import (
	"errors"
	"strings"
	"testing"
)

// A REPORTING_URL that already ends in the events route is refused with the
// URL to set instead: the collector adds the route itself, and would post to
// .../api/v1/events/api/v1/events, which answers 404.
func TestReportingURLWithTheEventsRouteRefused(t *testing.T) {
	for _, c := range []struct{ url, fix string }{
		{"http://h:8080/api/v1/events", "TALLY_OSC_REPORTING_URL=http://h:8080 "},
		{"https://h/tally/api/v1/events/", "TALLY_OSC_REPORTING_URL=https://h/tally "},
	} {
		_, err := Load(parse(t, nil), []string{"TALLY_OSC_REPORTING_URL=" + c.url, "TALLY_OSC_REPORTING_TOKEN=x", "TALLY_OSC_REPORTING_INSECURE=true"}, ModeDaemon)
		var ce *ConfigError
		if !errors.As(err, &ce) || len(ce.Problems) != 1 {
			t.Fatalf("%s: %v, want one problem", c.url, err)
		}
		msg := ce.Problems[0] + " "
		if !strings.HasPrefix(msg, "TALLY_OSC_REPORTING_URL: ") || !strings.Contains(msg, "/api/v1/events") || !strings.Contains(msg, c.fix) {
			t.Errorf("%s: %q, want it to name the route and say %q", c.url, msg, c.fix)
		}
	}
	// A base URL with a path of its own is fine.
	if _, err := Load(parse(t, nil), []string{"TALLY_OSC_REPORTING_URL=https://h/api/v1", "TALLY_OSC_REPORTING_TOKEN=x"}, ModeDaemon); err != nil {
		t.Errorf("https://h/api/v1: %v", err)
	}
}
