package daemon

// The one check in front of every HTTP route but the probes and the metrics.

import (
	"crypto/sha256"
	"crypto/subtle"
	"net/http"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/rs/zerolog"

	imetrics "github.com/tally-billing/tally-openstack-collector/internal/metrics"
	"github.com/tally-billing/tally-openstack-collector/internal/tokenfile"
)

// controlAuth guards the routes that show or change the daemon's state: the
// mapper catalogue, the dead letters (their bodies are notifications, with
// whatever the services put in them), replay, and the profiler.
//
//   - With a control token (CONTROL_TOKEN, or CONTROL_TOKEN_FILE, re-read when
//     it changes), a request must carry "Authorization: Bearer <token>";
//     otherwise 401. The comparison is in constant time.
//   - Without one, the routes are open when the listener is on loopback, and
//     refused with 403 otherwise (a Service, a pod network, a LAN).
//
// Failures are counted by reason and logged, sampled; neither the count nor
// the log carries the token presented.
type controlAuth struct {
	token    *tokenfile.Source // nil: no token configured
	loopback bool
	failures *prometheus.CounterVec
	log      zerolog.Logger // sampled
}

// Reasons of tally_collector_control_auth_failures_total.
const (
	authMissing = "missing"  // no bearer token in the request
	authWrong   = "wrong"    // a bearer token that is not the control token
	authNoToken = "no_token" // no control token set, and the listener is not on loopback
)

const noTokenMessage = "this route needs a control token: set TALLY_OSC_CONTROL_TOKEN or TALLY_OSC_CONTROL_TOKEN_FILE " +
	"(the daemon listens beyond loopback, so without a token only /livez, /readyz and /metrics answer)"

// The answers of a 401 name the settings that hold the token, on both
// sides: the daemon reads it from them, and so do the control commands.
const (
	missingTokenMessage = "this route needs the control token (the daemon's TALLY_OSC_CONTROL_TOKEN_FILE or TALLY_OSC_CONTROL_TOKEN), " +
		"sent as Authorization: Bearer <token>; the control commands read the same settings"
	wrongTokenMessage = "wrong control token: send the one the daemon reads from TALLY_OSC_CONTROL_TOKEN_FILE or TALLY_OSC_CONTROL_TOKEN"
)

func newControlAuth(token *tokenfile.Source, loopback bool, log zerolog.Logger, reg prometheus.Registerer) (*controlAuth, error) {
	a := &controlAuth{
		token:    token,
		loopback: loopback,
		failures: imetrics.CounterVec("tally_collector_control_auth_failures_total",
			"Requests refused by the control routes' check, by reason: missing or wrong bearer token, or no_token (no control token set on a listener beyond loopback).",
			imetrics.By("reason", authMissing, authWrong, authNoToken)),
		// At most 5 refusals a minute reach the log; the counter has them all.
		log: log.Sample(&zerolog.BurstSampler{Burst: 5, Period: time.Minute}),
	}
	if err := imetrics.Register(reg, a.failures); err != nil {
		return nil, err
	}
	return a, nil
}

// wrap puts the check in front of next.
func (a *controlAuth) wrap(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if a.token == nil {
			if a.loopback {
				next.ServeHTTP(w, r)
				return
			}
			a.refuse(w, r, authNoToken, http.StatusForbidden, noTokenMessage)
			return
		}
		want, err := a.token.Get()
		if err != nil {
			// The previous token stays in force; say why the new one is not.
			a.log.Error().Err(err).Msg("reading the control token file failed; the previous token stays in force")
		}
		got, ok := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer ")
		if !ok || got == "" {
			w.Header().Set("WWW-Authenticate", `Bearer realm="tally-openstack-collector"`)
			a.refuse(w, r, authMissing, http.StatusUnauthorized, missingTokenMessage)
			return
		}
		gs, ws := sha256.Sum256([]byte(got)), sha256.Sum256([]byte(want))
		if subtle.ConstantTimeCompare(gs[:], ws[:]) != 1 {
			w.Header().Set("WWW-Authenticate", `Bearer realm="tally-openstack-collector", error="invalid_token"`)
			a.refuse(w, r, authWrong, http.StatusUnauthorized, wrongTokenMessage)
			return
		}
		next.ServeHTTP(w, r)
	})
}

func (a *controlAuth) refuse(w http.ResponseWriter, r *http.Request, reason string, code int, msg string) {
	a.failures.WithLabelValues(reason).Inc()
	path := r.URL.Path
	if len(path) > 128 {
		path = path[:128] + "..."
	}
	a.log.Warn().Str("reason", reason).Str("remote", r.RemoteAddr).Str("method", r.Method).Str("path", path).
		Msg("control route refused")
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(code)
	_, _ = w.Write([]byte(`{"error":"` + msg + `"}` + "\n"))
}
