package overhead

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"strconv"
	"time"
)

// What else ran on the proxy's CPU during a window. A pinned proxy has CPU
// ProxyCPU to itself only if nothing else of the machine's is scheduled
// there and the host does not take the vCPU away: /proc/stat says both,
// per CPU. Steal is time the hypervisor ran something else while this
// vCPU wanted to run; the CPU's busy time (user, nice, system, irq,
// softirq) minus the proxy's own CPU time is what other tasks and
// interrupts used there. A window with more of the two than the
// threshold is measured again (measure), up to a bound per cell.

// hostCPU is one CPU's (or, not pinned, all CPUs') accumulated time from
// /proc/stat.
type hostCPU struct {
	busy, steal time.Duration
}

func (a hostCPU) sub(b hostCPU) hostCPU { return hostCPU{a.busy - b.busy, a.steal - b.steal} }

// errProcStat is a /proc/stat without the line asked for, or one that
// does not read as a CPU line.
var errProcStat = errors.New("unreadable /proc/stat")

// parseProcStat finds the line of CPU cpu in a /proc/stat text ("cpuN"; a
// negative cpu is the "cpu" line, every CPU summed) and returns its busy
// and steal time. The fields are USER_HZ ticks: user nice system idle
// iowait irq softirq steal (guest time is already in user).
func parseProcStat(b []byte, cpu int) (hostCPU, error) {
	name := []byte("cpu")
	if cpu >= 0 {
		name = strconv.AppendInt(name, int64(cpu), 10)
	}
	for line := range bytes.SplitSeq(b, []byte("\n")) {
		f := bytes.Fields(line)
		if len(f) < 9 || !bytes.Equal(f[0], name) {
			continue
		}
		var v [8]int64
		for i := range v {
			n, err := strconv.ParseInt(string(f[i+1]), 10, 64)
			if err != nil || n < 0 {
				return hostCPU{}, fmt.Errorf("%w: %q", errProcStat, line)
			}
			v[i] = n
		}
		tick := func(n int64) time.Duration { return time.Duration(n) * time.Second / clockTick }
		return hostCPU{busy: tick(v[0] + v[1] + v[2] + v[5] + v[6]), steal: tick(v[7])}, nil
	}
	return hostCPU{}, fmt.Errorf("%w: no %s line", errProcStat, name)
}

// procStatReader reads CPU cpu's line of /proc/stat (negative: all CPUs).
func procStatReader(cpu int) func() (hostCPU, error) {
	return func() (hostCPU, error) {
		b, err := os.ReadFile("/proc/stat")
		if err != nil {
			return hostCPU{}, err
		}
		return parseProcStat(b, cpu)
	}
}

// disturbance is what the host and the proxy's neighbours took of its
// CPU during one window, in ms per second of window. Other is nil when
// the proxy was not pinned: its CPU is then every CPU, which the
// generator and the engine share with it, and their time is no
// neighbour's.
type disturbance struct {
	steal float64
	other *float64
}

// total is the disturbance the threshold is compared with.
func (d disturbance) total() float64 {
	if d.other == nil {
		return d.steal
	}
	return d.steal + max(*d.other, 0)
}

// windowDisturbance is a window's disturbance from the host readings at
// its ends, the proxy's CPU time in it and its length.
func windowDisturbance(host hostCPU, proxy, el time.Duration, pinned bool) disturbance {
	perS := func(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) / el.Seconds() }
	d := disturbance{steal: perS(host.steal)}
	if pinned {
		d.other = ptr(perS(host.busy - proxy))
	}
	return d
}

// DefaultDisturbed is the default threshold (ms per second of window) of
// steal plus other tasks' time on the proxy's CPU above which a window is
// measured again. /proc/stat counts in 10 ms ticks, so over a 1.5 s window
// the reading itself is uncertain by about ±13 ms/s; BENCHMARKS.md §2 has
// the quiet and loaded readings the value was chosen from.
const DefaultDisturbed = 50.0

// ctxSwitches sums the voluntary and involuntary context switches of
// every thread of the processes pids returns: wake-ups, the unit of the
// proxy's per-request system cost, so a window whose CPU per request
// moved can be told apart from one whose wake-ups per request did.
func ctxSwitches(pids func() []int) float64 {
	if pids == nil {
		return 0
	}
	var n float64
	for _, pid := range pids() {
		dir := fmt.Sprintf("/proc/%d/task", pid)
		ents, err := os.ReadDir(dir)
		if err != nil {
			continue
		}
		for _, e := range ents {
			b, err := os.ReadFile(dir + "/" + e.Name() + "/status")
			if err == nil {
				n += statusSwitches(b)
			}
		}
	}
	return n
}

// statusSwitches reads voluntary_ctxt_switches + nonvoluntary_ctxt_switches
// of a /proc/<pid>/task/<tid>/status text.
func statusSwitches(b []byte) float64 {
	var n float64
	for line := range bytes.SplitSeq(b, []byte("\n")) {
		k, v, ok := bytes.Cut(line, []byte(":"))
		if !ok || (!bytes.Equal(k, []byte("voluntary_ctxt_switches")) && !bytes.Equal(k, []byte("nonvoluntary_ctxt_switches"))) {
			continue
		}
		if c, err := strconv.ParseFloat(string(bytes.TrimSpace(v)), 64); err == nil {
			n += c
		}
	}
	return n
}
