package main

import (
	"context"
	"fmt"
	"io"
	"runtime"
	"time"

	"github.com/rolter/rolter/certs"
	"github.com/rolter/rolter/config"
	"github.com/rolter/rolter/internal/cli"
	"github.com/rolter/rolter/internal/heapfloor"
	"github.com/rolter/rolter/internal/sysmontick"
	"github.com/rolter/rolter/routerd"
)

// runRouter is `rolter router`: the Raft replica of the control plane, the
// data plane on --http (rebuilt on every config_version) and, on --admin,
// the admin API, the dashboard, /metrics, /healthz and /readyz, until
// SIGINT/SIGTERM, then a drain. --standalone runs the data plane alone
// from --config. The process is routerd's; this is its command line.
func runRouter(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("router", stderr)
	var rc routerd.Config
	rc.RegisterFlags(fs)
	logFormat := fs.String("log-format", "text", "log format: text or json (the request log is one line per request)")
	gcFloor := fs.Int("gc-floor-mb", 8, "the heap grows by at least this many MiB between garbage collections "+
		"(GOGC, when set, is the percent above it; a heap past it that allocates slowly grows by 4 s of its allocation, at least 4 MB, "+
		"not GOGC's percent; 0: Go's own pacing, as GOGC alone gives)")
	sysmonBackoff := fs.Bool("sysmon-backoff", true, "run with GODEBUG "+sysmontick.Setting+
		", so Go's sysmon thread backs off under load instead of waking several times per request "+
		"(see docs/configuration.md)")
	timerSlack := fs.Duration("timer-slack", 20*time.Millisecond, "with --sysmon-backoff and one CPU for Go (GOMAXPROCS 1), "+
		"the process's timer slack: a timed sleep may end up to this much late, so an idle router's sysmon wakes "+
		"about 33 times a second instead of 100 (0: the system's; see docs/configuration.md)")
	var tf certs.ListenerFlags
	tf.RegisterFlags(fs, true, "admin")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if *sysmonBackoff {
		// On success this does not return: the program starts again, in
		// this process, with the setting (and finds it in place).
		slack := *timerSlack
		if runtime.GOMAXPROCS(0) > 1 {
			// With more than one P, the scheduler's work stealing naps
			// 3 µs at a time (runqgrab), which a slack would stretch to
			// up to the slack with a P held idle.
			slack = 0
		}
		if err := sysmontick.Ensure(slack); err != nil {
			fmt.Fprintf(stderr, "rolter router: running without the sysmon setting: %v\n", err)
		}
	}
	if *gcFloor > 0 {
		defer heapfloor.Keep(uint64(*gcFloor)<<20, heapfloor.Base())()
	}
	api, admin, err := tf.Load()
	if err != nil {
		return cli.Usage(err)
	}
	rc.TLS = routerd.TLS{API: api, Admin: admin, AdminClientCA: tf.Admin.ClientCA}
	if rc.File, err = config.Load(rc.ConfigPath); err != nil {
		return err
	}
	if rc.Logger, err = newLogger(*logFormat, stderr); err != nil {
		return err
	}
	rc.Build = version
	r, err := routerd.Open(ctx, rc)
	if err != nil {
		return err
	}
	defer r.Close()
	go certs.WatchSIGHUP(ctx, rc.Logger, api, admin, r.RaftCerts(), r.GossipCerts())
	hup, stopHUP := context.WithCancel(ctx)
	defer stopHUP()
	go routerd.ReloadOnHUP(hup, rc.ConfigPath, rc.Logger, r.Reload)
	fmt.Fprintln(stdout, r.Banner())
	return r.Run(ctx)
}
