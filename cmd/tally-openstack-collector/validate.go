package main

import (
	"errors"
	"fmt"
	"net"
	"net/url"
	"os"
	"strconv"
	"strings"
)

// validate checks the rules between settings for mode m; each value alone was
// checked by its row of the settings table.
func (c *Config) validate(m mode) []string {
	if m != modeDaemon {
		return nil
	}
	var p []string
	add := func(format string, args ...any) { p = append(p, fmt.Sprintf(format, args...)) }
	switch {
	case c.ReportingURL == "":
		add("%sREPORTING_URL: required (the base URL of the Reporting API)", envPrefix)
	default:
		if err := checkReportingURL(c.ReportingURL, c.ReportingInsecure); err != nil {
			add("%sREPORTING_URL: %v", envPrefix, err)
		}
	}
	switch {
	case c.ReportingToken != "" && c.ReportingTokenFile != "":
		add("%sREPORTING_TOKEN and %sREPORTING_TOKEN_FILE are both set: set one", envPrefix, envPrefix)
	case c.ReportingToken == "" && c.ReportingTokenFile == "":
		add("%sREPORTING_TOKEN or %sREPORTING_TOKEN_FILE: one is required", envPrefix, envPrefix)
	case c.ReportingTokenFile != "":
		b, err := os.ReadFile(c.ReportingTokenFile)
		switch {
		case err != nil:
			add("%sREPORTING_TOKEN_FILE: %v", envPrefix, errors.Unwrap(err))
		case strings.TrimSpace(string(b)) == "":
			add("%sREPORTING_TOKEN_FILE: %s is empty", envPrefix, c.ReportingTokenFile)
		}
	}
	if c.FlushTimeout > 0 && c.StopTimeout > 0 && c.FlushTimeout >= c.StopTimeout {
		add("%sFLUSH_TIMEOUT (%s) must be shorter than %sSTOP_TIMEOUT (%s)", envPrefix, c.FlushTimeout, envPrefix, c.StopTimeout)
	}
	return p
}

func checkReportingURL(raw string, insecure bool) error {
	u, err := url.Parse(raw)
	if err != nil {
		return errors.New("not a URL")
	}
	if !u.IsAbs() || u.Host == "" || u.Hostname() == "" {
		return errors.New("must be absolute with a host, like https://tally.example.com")
	}
	switch u.Scheme {
	case "https":
	case "http":
		if !insecure {
			return fmt.Errorf("must be https (the token travels with every request); set %sREPORTING_INSECURE=true to allow http on a trusted link", envPrefix)
		}
	default:
		return fmt.Errorf("scheme %q is not https", u.Scheme)
	}
	if u.User != nil {
		return errors.New("must not carry credentials: use REPORTING_TOKEN")
	}
	return nil
}

func checkListenAddr(raw string) error {
	u, err := url.Parse(raw)
	if err != nil {
		return errors.New("not a URL")
	}
	if u.Scheme != "udp" && u.Scheme != "tcp" {
		return errors.New("scheme must be udp or tcp")
	}
	_, port, err := net.SplitHostPort(u.Host)
	if err != nil {
		return errors.New("want udp://host:port or tcp://host:port")
	}
	if n, err := strconv.Atoi(port); err != nil || n < 0 || n > 65535 {
		return errors.New("port is not a number between 0 and 65535")
	}
	if u.Path != "" && u.Path != "/" {
		return errors.New("no path allowed")
	}
	return nil
}
