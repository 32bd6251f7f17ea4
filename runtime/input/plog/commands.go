package plog

import (
	"bytes"
	"encoding/json"
	"sort"
	"strings"

	"github.com/tally-billing/tally-openstack-collector/internal/redact"
)

// maxReply bounds a command answer to what one UDP datagram carries.
const maxReply = 65507

// command is the outcome of a version 0 command packet.
type command struct {
	reply     []byte // nil: no answer
	kill      bool   // a permitted KILL: stop gracefully
	refused   string // the command refused, for the log
	untrusted bool   // refused for its source, not for the listener's switches
}

// commandEnv is what the commands need from their listener.
type commandEnv struct {
	allowEnvi bool
	allowKill bool
	canStop   bool
	// trusted: the packet's source is in Options.TrustedSources. Only a
	// trusted source gets a reply larger than its request (STAT, ENVI) or may
	// stop the daemon (KILL): a UDP source address is easily forged, and a
	// 6-byte STAT would otherwise send kilobytes to whoever it names.
	trusted  bool
	snapshot func() Snapshot
	environ  func() []string
}

// runCommand answers the packet body after the two leading bytes (\0\0): four
// ASCII letters, case-insensitive, then an optional payload.
func runCommand(st *stats, env commandEnv, body []byte) (command, bool) {
	if len(body) < 4 {
		st.unknownCommand.Add(1)
		return command{}, false
	}
	name := strings.ToUpper(string(body[:4]))
	rest := body[4:]
	switch name {
	case "PING":
		st.v0Commands.Add(1)
		reply := make([]byte, 0, 4+len(rest))
		reply = append(append(reply, "PONG"...), rest...)
		return command{reply: reply}, true
	case "STAT", "ENVI", "KILL":
	default:
		st.unknownCommand.Add(1)
		return command{}, false
	}
	// The commands only a trusted source may run.
	st.v0Commands.Add(1)
	if !env.trusted {
		st.v0Untrusted.Add(1)
		return command{refused: name, untrusted: true}, true
	}
	switch {
	case name == "STAT":
		b, err := json.Marshal(env.snapshot())
		if err != nil {
			st.exceptions.Add(1)
			return command{}, true
		}
		return command{reply: b}, true
	case name == "ENVI" && env.allowEnvi:
		return command{reply: redactedEnviron(env.environ())}, true
	case name == "KILL" && env.allowKill && env.canStop:
		return command{kill: true}, true
	}
	st.v0RefusedCommands.Add(1)
	return command{refused: name}, true
}

// redactedEnviron renders the environment as sorted NAME=value lines, with the
// value of every variable named like a credential or holding a URL with a
// password replaced by the redaction marker (internal/redact), cut to one
// datagram.
func redactedEnviron(environ []string) []byte {
	lines := make([]string, 0, len(environ))
	for _, kv := range environ {
		name, value, _ := strings.Cut(kv, "=")
		lines = append(lines, name+"="+redact.Env(name, value))
	}
	sort.Strings(lines)
	var b bytes.Buffer
	for _, l := range lines {
		if b.Len()+len(l)+1 > maxReply {
			break
		}
		b.WriteString(l)
		b.WriteByte('\n')
	}
	return b.Bytes()
}
