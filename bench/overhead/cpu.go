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
// ways, and how long their threads have waited for a CPU. Exact is
// nanoseconds on CPU (user + system, softirq work done in the processes'
// context included): the kernel's per-process CPU clock, which also keeps
// the time of threads that have exited, or where that clock cannot be read
// the sum of every live thread's /proc/<pid>/task/<tid>/schedstat. Ticks
// is utime + stime of /proc/<pid>/stat, the same time in USER_HZ clock
// ticks (10 ms), kept as a cross-check. Wait is the live threads' time
// runnable but not running (schedstat's second field): on a machine whose
// other processes take the proxy's CPU it grows, and the CPU figure of
// that window is a disturbed one.
type cpuUse struct {
	Exact, Ticks, Wait time.Duration
}

func (a cpuUse) sub(b cpuUse) cpuUse {
	return cpuUse{a.Exact - b.Exact, a.Ticks - b.Ticks, a.Wait - b.Wait}
}

// readCPU sums the CPU time of the processes pids returns. A process that
// has gone counts nothing.
func readCPU(pids func() []int) cpuUse {
	var u cpuUse
	if pids == nil {
		return u
	}
	for _, pid := range pids() {
		st, stErr := taskSchedstat(fmt.Sprintf("/proc/%d/task", pid))
		if d, err := processClock(pid); err == nil {
			u.Exact += d
		} else if stErr == nil {
			u.Exact += st.run
		}
		u.Wait += st.wait
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

// schedstat is a thread's (or threads') time on CPU and time runnable
// but waiting for one.
type schedstat struct{ run, wait time.Duration }

// parseSchedstat reads a schedstat file: the thread's time on CPU and its
// time waiting on a run queue, in nanoseconds, then its count of
// timeslices.
func parseSchedstat(b []byte) (schedstat, error) {
	f := bytes.Fields(b)
	if len(f) < 3 {
		return schedstat{}, fmt.Errorf("%w: %q", errSchedstat, b)
	}
	run, err1 := strconv.ParseInt(string(f[0]), 10, 64)
	wait, err2 := strconv.ParseInt(string(f[1]), 10, 64)
	if err1 != nil || err2 != nil || run < 0 || wait < 0 {
		return schedstat{}, fmt.Errorf("%w: %q", errSchedstat, b)
	}
	return schedstat{time.Duration(run), time.Duration(wait)}, nil
}

// taskSchedstat sums the schedstat of every thread under dir (a
// /proc/<pid>/task directory). A thread that exits between the listing
// and the read is skipped; one that exited earlier is not in the sum.
func taskSchedstat(dir string) (schedstat, error) {
	var total schedstat
	read, err := eachThread(dir, "schedstat", func(b []byte) error {
		st, err := parseSchedstat(b)
		if err != nil {
			return err
		}
		total.run += st.run
		total.wait += st.wait
		return nil
	})
	if err != nil {
		return schedstat{}, err
	}
	if read == 0 {
		return total, fmt.Errorf("%w: no thread of %s could be read", errSchedstat, dir)
	}
	return total, nil
}

// eachThread calls fn with the file name of every thread under dir (a
// /proc/<pid>/task directory) and says how many it read; a thread that
// exits between the listing and the read is skipped. fn's error stops
// the walk.
func eachThread(dir, name string, fn func(b []byte) error) (read int, err error) {
	ents, err := os.ReadDir(dir)
	if err != nil {
		return 0, err
	}
	for _, e := range ents {
		b, err := os.ReadFile(filepath.Join(dir, e.Name(), name))
		if err != nil {
			continue
		}
		if err := fn(b); err != nil {
			return read, err
		}
		read++
	}
	return read, nil
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

// trimmedMean is the mean of vs without its highest and its lowest value
// (with fewer than three, the mean of all; 0 for none): the CPU figure of
// a cell. Against the median it uses ten of twelve windows, not two, and a
// window a neighbour disturbed still cannot move it alone; on the eight
// pairs of default runs in docs/bench it agreed with the other run of its
// pair within 15 % in 74 of 96 cells, the plain mean too, the median in
// 69 (BENCHMARKS.md §2, Method).
func trimmedMean(vs []float64) float64 {
	if len(vs) == 0 {
		return 0
	}
	s := slices.Clone(vs)
	slices.Sort(s)
	if len(s) >= 3 {
		s = s[1 : len(s)-1]
	}
	var sum float64
	for _, v := range s {
		sum += v
	}
	return sum / float64(len(s))
}
