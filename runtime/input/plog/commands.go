package plog

import (
	"bytes"
	"encoding/json"
	"regexp"
	"sort"
	"strings"
)

// maxReply bounds a command answer to what one UDP datagram carries.
const maxReply = 65507

// command is the outcome of a version 0 command packet.
type command struct {
	reply   []byte // nil: no answer
	kill    bool   // a permitted KILL: stop gracefully
	refused string // the command refused, for the log
}

// commandEnv is what the commands need from their listener.
type commandEnv struct {
	allowEnvi bool
	allowKill bool
	canStop   bool
	snapshot  func() Snapshot
	environ   func() []string
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
	case "STAT":
		st.v0Commands.Add(1)
		b, err := json.Marshal(env.snapshot())
		if err != nil {
			st.exceptions.Add(1)
			return command{}, true
		}
		return command{reply: b}, true
	case "ENVI":
		st.v0Commands.Add(1)
		if !env.allowEnvi {
			st.v0RefusedCommands.Add(1)
			return command{refused: name}, true
		}
		return command{reply: redactedEnviron(env.environ())}, true
	case "KILL":
		st.v0Commands.Add(1)
		if !env.allowKill || !env.canStop {
			st.v0RefusedCommands.Add(1)
			return command{refused: name}, true
		}
		return command{kill: true}, true
	}
	st.unknownCommand.Add(1)
	return command{}, false
}

// secretName matches environment variable names that hold secrets.
var secretName = regexp.MustCompile(`(?i)PASSWORD|PASSWD|TOKEN|SECRET|KEY|CREDENTIAL`)

// urlWithUserinfo matches a URL carrying user information (user:pass@host),
// anywhere in a value, including oslo's multi-host transport URLs.
var urlWithUserinfo = regexp.MustCompile(`[A-Za-z][A-Za-z0-9+.-]*://[^/?#\s]*@`)

const redacted = "<redacted>"

// redactedEnviron renders the environment as sorted NAME=value lines, with the
// value of every secret-looking variable replaced, cut to one datagram.
func redactedEnviron(environ []string) []byte {
	lines := make([]string, 0, len(environ))
	for _, kv := range environ {
		name, value, _ := strings.Cut(kv, "=")
		if secretName.MatchString(name) || urlWithUserinfo.MatchString(value) {
			value = redacted
		}
		lines = append(lines, name+"="+value)
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
