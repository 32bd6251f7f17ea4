package settings

import (
	"errors"
	"fmt"
	"io/fs"
	"net"
	"net/url"
	"os"
	"strconv"
	"strings"

	"github.com/tally-billing/tally-openstack-collector/internal/tlsfiles"
	"github.com/tally-billing/tally-openstack-collector/internal/tokenfile"
	"github.com/tally-billing/tally-openstack-collector/runtime/input/broker"
	"github.com/tally-billing/tally-openstack-collector/sender"
)

// validate checks the rules between settings for mode m; each value alone was
// checked by its row of the settings table.
func (c *Config) validate(m Mode) []string {
	var p []string
	add := func(format string, args ...any) { p = append(p, fmt.Sprintf(format, args...)) }
	if m == ModeDaemon || m == ModeDump {
		// The URL alone was checked by its row; here its TLS files.
		if checkTransportURL(c.TransportURL) == nil {
			if err := broker.CheckTLS(c.TransportURL, c.TransportTLS); err != nil {
				add("%s: %v", c.namesOf("transport_ca_file", "transport_cert_file", "transport_key_file", "transport_server_name"), tlsProblem(err))
			}
		}
	}
	if m != ModeDaemon {
		return p
	}
	switch {
	case c.ReportingURL == "":
		add("%sREPORTING_URL: required (the base URL of the Reporting API)", EnvPrefix)
	default:
		if err := checkReportingURL(c.ReportingURL, c.ReportingInsecure); err != nil {
			add("%sREPORTING_URL: %v", EnvPrefix, err)
		} else if err := sender.CheckTLS(c.ReportingURL, c.ReportingTLS); err != nil {
			add("%s: %v", c.namesOf("reporting_ca_file", "reporting_cert_file", "reporting_key_file"), tlsProblem(err))
		}
	}
	switch {
	case c.ReportingToken != "" && c.ReportingTokenFile != "":
		add("%s and %s are both set: set one", c.nameOf("reporting_token"), c.nameOf("reporting_token_file"))
	case c.ReportingToken == "" && c.ReportingTokenFile == "":
		add("%sREPORTING_TOKEN or %sREPORTING_TOKEN_FILE: one is required", EnvPrefix, EnvPrefix)
	case c.ReportingTokenFile != "":
		if _, _, err := tokenfile.Read(c.ReportingTokenFile); err != nil {
			add("%s: %v", c.nameOf("reporting_token_file"), fileProblem(c.ReportingTokenFile, err))
		}
	}
	switch {
	case c.ControlToken != "" && c.ControlTokenFile != "":
		add("%s and %s are both set: set one", c.nameOf("control_token"), c.nameOf("control_token_file"))
	case c.ControlTokenFile != "":
		if _, _, err := tokenfile.Read(c.ControlTokenFile); err != nil {
			add("%s: %v", c.nameOf("control_token_file"), fileProblem(c.ControlTokenFile, err))
		}
	}
	if c.DebugPprof && !IsLoopbackAddr(c.DebugPprofAddr) {
		add("%s (%s) must be a loopback address: the profiler shows the command line, the heap and the goroutines", c.nameOf("debug_pprof_addr"), c.DebugPprofAddr)
	}
	// Each under its own minimum is one problem already.
	if c.FlushTimeout >= MinFlushTimeout && c.StopTimeout >= MinStopTimeout && c.StopTimeout-c.FlushTimeout < MinInputsStop {
		add("%s (%s) must be shorter than %s (%s) by at least %s, the inputs' time to stop", c.nameOf("flush_timeout"), c.FlushTimeout, c.nameOf("stop_timeout"), c.StopTimeout, MinInputsStop)
	}
	return p
}

// tlsProblem is a TLS check's error without the sentinel's words, which the
// settings' names already give.
func tlsProblem(err error) error {
	msg := err.Error()
	for _, prefix := range []string{broker.ErrTransportURL.Error() + ": ", tlsfiles.ErrFiles.Error() + ": ", sender.ErrInvalidURL.Error() + ": "} {
		msg = strings.TrimPrefix(msg, prefix)
	}
	return errors.New(msg)
}

// fileProblem is the error of a failed file operation on path as "path:
// cause", without the operation's name; an error that does not come from
// the file system, which names the path itself, comes back as it is.
func fileProblem(path string, err error) error {
	var pe *fs.PathError
	if errors.As(err, &pe) {
		return fmt.Errorf("%s: %w", path, pe.Err)
	}
	return err
}

// mappersDirWarning is the warning of a drop-in directory that does not
// exist (yet): the daemon starts with the built-in modules and reads the
// directory when it appears (docs/mappers-lifecycle.md, "Restarts"). A
// refusal would keep a systemd unit down for good (its
// RestartPreventExitStatus=2) over a volume mounted a little late.
func (c *Config) mappersDirWarning() string {
	if c.MappersDir == "" {
		return ""
	}
	if _, err := os.Stat(c.MappersDir); !errors.Is(err, fs.ErrNotExist) {
		return ""
	}
	return fmt.Sprintf("%s: %s does not exist: the built-in mappers serve, and its modules are loaded when it appears",
		c.nameOf("mappers_dir"), c.MappersDir)
}

func checkReportingURL(raw string, insecure bool) error {
	// The sender's check, the one home of what a Reporting API URL may be;
	// its sentinel prefix says nothing the setting's name does not.
	err := sender.CheckURL(raw, insecure, EnvPrefix)
	if err != nil {
		return errors.New(strings.TrimPrefix(err.Error(), sender.ErrInvalidURL.Error()+": "))
	}
	return nil
}

// checkHostPort accepts a listen address as net.Listen takes it, host:port,
// with a port number from 0 to 65535 (0: any free port).
//
//	checkHostPort("127.0.0.1:9469")  // nil
//	checkHostPort(":9469")           // nil
//	checkHostPort("127.0.0.1:99999") // the port is not a number between 0 and 65535
func checkHostPort(addr string) error {
	_, port, err := net.SplitHostPort(addr)
	if err != nil {
		return fmt.Errorf("%q is not host:port", addr)
	}
	if n, err := strconv.Atoi(port); err != nil || n < 0 || n > 65535 {
		return fmt.Errorf("%q: the port is not a number between 0 and 65535", addr)
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

// IsLoopbackAddr reports whether a listen address (host:port) is on a
// loopback interface only: the control routes are open there without a token,
// and the profiler listens nowhere else.
//
//	IsLoopbackAddr("127.0.0.1:9469") // true
//	IsLoopbackAddr("[::1]:9469")     // true
//	IsLoopbackAddr("localhost:9469") // true
//	IsLoopbackAddr("0.0.0.0:9469")   // false
//	IsLoopbackAddr(":9469")          // false
func IsLoopbackAddr(addr string) bool {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return false
	}
	if host == "localhost" {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}
