package daemon

import (
	"os"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/tally-billing/tally-openstack-collector/cmd/tally-openstack-collector/internal/settings"
	"github.com/tally-billing/tally-openstack-collector/internal/testkit"
)

// builtinsCompiled reads tally_collector_mapper_builtins_compiled from the
// daemon's /metrics.
func builtinsCompiled(t *testing.T, d *inProcess) float64 {
	t.Helper()
	_, body, err := d.get("/metrics")
	if err != nil {
		t.Fatal(err)
	}
	return metricValue(t, body, "tally_collector_mapper_builtins_compiled")
}

// TestStartCompilesNothing: a daemon started on an empty data directory,
// with the default compilation cache, is ready without compiling a module
// (builtins_compiled 0, nothing in the cache); the first nova notification
// compiles nova alone, into mapper-cache beside the outbox; a second start on
// the same data directory compiles nothing at start either, and maps from
// the cache without writing to it.
func TestStartCompilesNothing(t *testing.T) {
	v := testkit.NewVhost(t)
	v.DeclareExchanges(t, false, "nova")
	api, srv := referenceAPI(t)
	data := t.TempDir()
	cacheDir := filepath.Join(data, "mapper-cache")

	accepted := func(n int) {
		t.Helper()
		testkit.WaitFor(t, 2*time.Minute, "the events at the Reporting API", func() bool {
			st, err := api.Stats()
			if err != nil {
				t.Fatal(err)
			}
			return st.Accepted == int64(n)
		})
	}
	var first map[string]os.FileInfo
	for run := 1; run <= 2; run++ {
		cfg := daemonSettings(t, v, srv.URL, "TALLY_OSC_MAPPER_CACHE_DIR=", "TALLY_OSC_BUFFER_PATH="+filepath.Join(data, "outbox"),
			"TALLY_OSC_HTTP_ADDR="+testkit.FreeAddr(t))
		d := runInProcess(t, cfg)
		d.waitReady(t)
		if n := builtinsCompiled(t, d); n != 0 {
			t.Fatalf("start %d: builtins_compiled %v once ready, want 0", run, n)
		}
		entries := testkit.CacheEntries(t, cacheDir)
		if run == 1 && len(entries) != 0 {
			t.Fatalf("first start: %d modules compiled into %s before any notification", len(entries), cacheDir)
		}
		v.Publish(t, "nova", "notifications.info", novaNotification(t, run))
		accepted(run)
		if n := builtinsCompiled(t, d); n != 1 {
			t.Fatalf("start %d: builtins_compiled %v after a nova notification, want 1", run, n)
		}
		entries = testkit.CacheEntries(t, cacheDir)
		if run == 1 {
			if len(entries) == 0 {
				t.Fatalf("nothing compiled into %s", cacheDir)
			}
			first = entries
		} else if len(entries) != len(first) {
			t.Fatalf("second start: %d entries in the cache, want the %d of the first", len(entries), len(first))
		}
		for p, st := range first {
			if e := entries[p]; e == nil || !e.ModTime().Equal(st.ModTime()) {
				t.Fatalf("start %d: entry %s written again", run, p)
			}
		}
		d.signals <- syscall.SIGTERM
		if err := d.returned(t, 2*cfg.StopTimeout); err != nil {
			t.Fatalf("Run after a signal: %v\n%s", err, d.log)
		}
	}
}

// The default compilation caches: beside the outbox for the daemon, in the
// user's cache directory for the commands; off and none turn it off, and a
// directory named is used as it is.
func TestMapperCacheDirDefaults(t *testing.T) {
	t.Setenv("XDG_CACHE_HOME", "/home/u/.cache")
	t.Setenv("HOME", "/home/u")
	for _, c := range []struct {
		set, daemon, command string
	}{
		{"", "/data/mapper-cache", "/home/u/.cache/tally-openstack-collector"},
		{"off", "", ""},
		{"none", "", ""},
		{"OFF", "", ""},
		{"/var/cache/x", "/var/cache/x", "/var/cache/x"},
	} {
		cfg := &settings.Config{BufferPath: "/data/outbox/", MapperCacheDir: c.set}
		if got := daemonCacheDir(cfg); got.dir != c.daemon || got.explicit != (c.set != "") {
			t.Errorf("%q: daemon %+v, want %q", c.set, got, c.daemon)
		}
		if got := commandCacheDir(cfg); got.dir != c.command {
			t.Errorf("%q: commands %+v, want %q", c.set, got, c.command)
		}
	}
}
