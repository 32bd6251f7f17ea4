package cli

import (
	"fmt"
	"io"
	"net/http"
	"strings"
	"time"
)

const livezUsage = `Usage: tally-openstack-collector livez

Asks the running daemon's /livez on HTTP_ADDR (an unspecified listen host is
reached on loopback), with a 5 s timeout: exit 0 when it answers ok, 1 when it
answers otherwise or not at all. For a container HEALTHCHECK, where the image
has no HTTP client of its own.

Flags:
`

func runLivez(args, environ []string, stdout, stderr io.Writer) int {
	fs := controlFlags("livez")
	if code := parseFlags(fs, livezUsage, args, stdout, stderr); code >= 0 {
		return code
	}
	if fs.NArg() > 0 {
		fmt.Fprintf(stderr, "livez takes no arguments\n")
		return 2
	}
	cl, err := controlClient(fs, environ)
	if err != nil {
		fmt.Fprintln(stderr, err)
		return 2
	}
	resp, err := (&http.Client{Timeout: 5 * time.Second}).Get(cl.BaseURL + "/livez")
	if err != nil {
		fmt.Fprintf(stderr, "livez: %v\n", err)
		return 1
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(io.LimitReader(resp.Body, 256))
	answer := strings.TrimSpace(string(body))
	if resp.StatusCode != http.StatusOK {
		fmt.Fprintf(stderr, "livez: %d %s\n", resp.StatusCode, answer)
		return 1
	}
	fmt.Fprintln(stdout, answer)
	return 0
}
