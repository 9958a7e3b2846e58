// Package sysmontick owns the one runtime setting of `rolter router` that
// only the environment can give: how Go's monitor thread, sysmon, sleeps.
//
// sysmon runs beside the scheduler. When every P is idle it sleeps on a
// note; the next system call a goroutine enters wakes it and sets its
// tick back to 20 µs, and it then wakes every 20 µs while a P is busy,
// doubling the tick toward 10 ms only after 50 ticks with nothing to do. A
// router's P goes idle at least once per request (waiting for the engine,
// then for the client), so under load sysmon wakes several times per
// request, each wake a context switch on the CPU the request runs on
// (BENCHMARKS.md §2, "The Go runtime's share"). Go has no setting for the
// tick (golang/go#18236). What keeps sysmon off the note is GODEBUG's
// schedtrace: with a trace period set, sysmon never sleeps on the note,
// and its tick backs off to 10 ms while nothing needs retaking. Ensure
// runs the program again with the longest period (about 24.8 days): the
// runtime prints its scheduler line to stderr once per period of the
// machine's monotonic clock, so at most once per 24.8 days of uptime.
//
// Backed off, sysmon still wakes every 10 ms, idle or not: 100 wakes a
// second, each a context switch and a timer interrupt, about 25 µs of an
// idle router's CPU on a VM (2.7 ms per second). Ensure also gives the
// program a timer slack (Linux: prctl PR_SET_TIMERSLACK on the thread that
// execs, which the program's first thread keeps and every thread it makes
// inherits, sysmon's first): the kernel may then end a timed sleep up to
// that much late, so that it can serve several with one wake-up. sysmon's
// 10 ms sleep then lasts up to 10 ms + the slack; the program's own timers
// fire up to the slack late while it is idle (a busy one is woken by its
// network events before its timers are due, and sees them then). The
// caller decides when a slack is safe: the scheduler's own short naps
// (work stealing's 3 µs between Ps) stretch to the slack too.
package sysmontick

import (
	"errors"
	"os"
	"strings"
	"time"
)

// Setting is the GODEBUG setting Ensure adds: schedtrace's longest period,
// in milliseconds.
const Setting = "schedtrace=2147483647"

// ErrUnsupported is Ensure's error where a process cannot replace itself.
var ErrUnsupported = errors.New("sysmontick: re-executing the process is not supported on this system")

// Ensure runs the program again, in this process (exec: same pid, same
// arguments), with Setting added to GODEBUG and the given timer slack (0:
// the system's), unless GODEBUG already sets schedtrace (an operator's own
// value is kept, and the slack is not set). It returns nil without running
// anything when the setting is in place, and an error when it could not
// exec; on success it does not return.
func Ensure(slack time.Duration) error {
	godebug := os.Getenv("GODEBUG")
	if Has(godebug) {
		return nil
	}
	exe, err := os.Executable()
	if err != nil {
		return err
	}
	return reexec(exe, os.Args, withSetting(os.Environ(), godebug), slack)
}

// Has reports whether a GODEBUG value sets schedtrace.
func Has(godebug string) bool {
	for kv := range strings.SplitSeq(godebug, ",") {
		if k, _, _ := strings.Cut(strings.TrimSpace(kv), "="); k == "schedtrace" {
			return true
		}
	}
	return false
}

// withSetting is env with GODEBUG replaced by godebug plus Setting.
func withSetting(env []string, godebug string) []string {
	v := Setting
	if godebug != "" {
		v = godebug + "," + Setting
	}
	out := make([]string, 0, len(env)+1)
	for _, kv := range env {
		if !strings.HasPrefix(kv, "GODEBUG=") {
			out = append(out, kv)
		}
	}
	return append(out, "GODEBUG="+v)
}
