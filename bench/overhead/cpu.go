package overhead

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"time"
)

// cpuUse is the CPU time a set of processes has used so far, read two
// ways. Exact is nanoseconds on CPU (user + system, softirq work done in
// the processes' context included): the kernel's per-process CPU clock,
// which also keeps the time of threads that have exited, or where that
// clock cannot be read the sum of every live thread's
// /proc/<pid>/task/<tid>/schedstat. Ticks is utime + stime of
// /proc/<pid>/stat, the same time in USER_HZ clock ticks (10 ms), kept as
// a cross-check.
type cpuUse struct {
	Exact, Ticks time.Duration
}

func (a cpuUse) sub(b cpuUse) cpuUse { return cpuUse{a.Exact - b.Exact, a.Ticks - b.Ticks} }

// readCPU sums the CPU time of the processes pids returns. A process that
// has gone counts nothing.
func readCPU(pids func() []int) cpuUse {
	var u cpuUse
	if pids == nil {
		return u
	}
	for _, pid := range pids() {
		if d, err := processClock(pid); err == nil {
			u.Exact += d
		} else if d, err := taskSchedstat(fmt.Sprintf("/proc/%d/task", pid)); err == nil {
			u.Exact += d
		}
		u.Ticks += statTicks(pid)
	}
	return u
}

// clockTick is USER_HZ, the unit of /proc/<pid>/stat CPU times on Linux.
const clockTick = 100

// statTicks is utime + stime of /proc/<pid>/stat.
func statTicks(pid int) time.Duration {
	st, ok := procStat(pid)
	if !ok || len(st) < 15 {
		return 0
	}
	u, _ := strconv.ParseInt(st[13], 10, 64)
	s, _ := strconv.ParseInt(st[14], 10, 64)
	return time.Duration(u+s) * time.Second / clockTick
}

// errSchedstat is a schedstat file that does not read as one.
var errSchedstat = errors.New("unreadable schedstat")

// parseSchedstat reads the first field of a schedstat file: the thread's
// time on CPU in nanoseconds (then come its time waiting on a run queue
// and its count of timeslices).
func parseSchedstat(b []byte) (time.Duration, error) {
	f := bytes.Fields(b)
	if len(f) < 3 {
		return 0, fmt.Errorf("%w: %q", errSchedstat, b)
	}
	ns, err := strconv.ParseInt(string(f[0]), 10, 64)
	if err != nil || ns < 0 {
		return 0, fmt.Errorf("%w: %q", errSchedstat, b)
	}
	return time.Duration(ns), nil
}

// taskSchedstat sums the on-CPU time of every thread under dir (a
// /proc/<pid>/task directory). A thread that exits between the listing
// and the read is skipped; one that exited earlier is not in the sum.
func taskSchedstat(dir string) (time.Duration, error) {
	ents, err := os.ReadDir(dir)
	if err != nil {
		return 0, err
	}
	var total time.Duration
	read := 0
	for _, e := range ents {
		b, err := os.ReadFile(filepath.Join(dir, e.Name(), "schedstat"))
		if err != nil {
			continue
		}
		d, err := parseSchedstat(b)
		if err != nil {
			return 0, err
		}
		total += d
		read++
	}
	if read == 0 {
		return 0, fmt.Errorf("%w: no thread of %s could be read", errSchedstat, dir)
	}
	return total, nil
}

// median is the middle value of vs (the mean of the two middle ones for
// an even count); 0 for none.
func median(vs []float64) float64 {
	if len(vs) == 0 {
		return 0
	}
	s := slices.Clone(vs)
	slices.Sort(s)
	if len(s)%2 == 1 {
		return s[len(s)/2]
	}
	return (s[len(s)/2-1] + s[len(s)/2]) / 2
}
