package overhead

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"strconv"
	"time"
)

// What else ran on the benchmark's CPUs during a window. A pinned proxy
// has CPU ProxyCPU to itself only if nothing else of the machine's is
// scheduled there and the host does not take the vCPU away, and the
// generator paces its requests evenly only if it has its CPUs: a
// generator that lost its CPU sends a burst after, which the proxy serves
// with fewer wake-ups per request, and reads cheaper. /proc/stat says
// both, per CPU. Steal is time the hypervisor ran something else while
// the vCPU wanted to run; a CPU's busy time minus what the benchmark's
// own processes ran there (the proxy on its CPU, this process, the
// generator and the engine, on the rest) is what other tasks and
// interrupts used. Busy time is the window's wall time less the CPU's
// idle, iowait and steal (steal only as far as it is not inside the idle
// time, setDisturbance), not the sum of its user, system, irq and
// softirq: the kernel charges those a tick at a time to whatever runs
// at the tick, which over a 1.5 s window was off by up to 70 ms on this
// machine, while idle time is kept exactly on a tickless kernel. A window with more of the two
// than the threshold on the proxy's CPU, or per CPU on the generator's,
// is measured again (measure), up to a bound per cell.

// hostCPU is a CPU's (or CPUs') accumulated idle (with iowait) and
// steal time from /proc/stat.
type hostCPU struct {
	idle, steal time.Duration
}

func (a hostCPU) sub(b hostCPU) hostCPU { return hostCPU{a.idle - b.idle, a.steal - b.steal} }

// hostSample is /proc/stat at one moment (at): the proxy's CPU, and every
// other CPU summed (the generator's) with their count. Not pinned, the
// proxy's is every CPU and there is no rest. The difference of two
// (sub) has the wall time between them in span.
type hostSample struct {
	proxy, rest hostCPU
	restCPUs    int
	at          time.Time
	span        time.Duration
}

func (a hostSample) sub(b hostSample) hostSample {
	return hostSample{proxy: a.proxy.sub(b.proxy), rest: a.rest.sub(b.rest), restCPUs: a.restCPUs, span: a.at.Sub(b.at)}
}

// errProcStat is a /proc/stat without the line asked for, or one that
// does not read as a CPU line.
var errProcStat = errors.New("unreadable /proc/stat")

// parseProcStat reads a /proc/stat text: CPU cpu's line ("cpuN") and the
// sum of the other CPUs' lines, or for a negative cpu the "cpu" line,
// every CPU summed. The fields are USER_HZ ticks: user nice system idle
// iowait irq softirq steal (guest time is already in user).
func parseProcStat(b []byte, cpu int) (hostSample, error) {
	var h hostSample
	found := false
	for line := range bytes.SplitSeq(b, []byte("\n")) {
		f := bytes.Fields(line)
		if len(f) == 0 || !bytes.HasPrefix(f[0], []byte("cpu")) {
			continue
		}
		n := -1
		if id := f[0][3:]; len(id) > 0 {
			v, err := strconv.Atoi(string(id))
			if err != nil {
				continue
			}
			n = v
		}
		if (cpu < 0) != (n < 0) {
			continue
		}
		t, err := cpuLine(f)
		if err != nil {
			return hostSample{}, fmt.Errorf("%w: %q", err, line)
		}
		if n == cpu {
			h.proxy, found = t, true
		} else {
			h.rest.idle += t.idle
			h.rest.steal += t.steal
			h.restCPUs++
		}
	}
	if !found {
		return hostSample{}, fmt.Errorf("%w: no line for CPU %d", errProcStat, cpu)
	}
	return h, nil
}

// cpuLine reads the idle (idle + iowait) and steal time of one
// /proc/stat CPU line's fields.
func cpuLine(f [][]byte) (hostCPU, error) {
	if len(f) < 9 {
		return hostCPU{}, errProcStat
	}
	var v [8]int64
	for i := range v {
		n, err := strconv.ParseInt(string(f[i+1]), 10, 64)
		if err != nil || n < 0 {
			return hostCPU{}, errProcStat
		}
		v[i] = n
	}
	tick := func(n int64) time.Duration { return time.Duration(n) * time.Second / clockTick }
	return hostCPU{idle: tick(v[3] + v[4]), steal: tick(v[7])}, nil
}

// procStatReader reads /proc/stat for CPU cpu (negative: all CPUs).
func procStatReader(cpu int) func() (hostSample, error) {
	return func() (hostSample, error) {
		b, err := os.ReadFile("/proc/stat")
		if err != nil {
			return hostSample{}, err
		}
		h, err := parseProcStat(b, cpu)
		h.at = time.Now()
		return h, err
	}
}

// setDisturbance fills w's host figures, in ms per second of window, and
// the CPUs' busy shares, from the /proc/stat difference h around a window
// of length el in which the proxy ran proxy and this process self. Not
// pinned there is no other tasks' figure: the proxy's CPU is every CPU,
// which the generator and the engine share with it.
//
// The kernel counts steal twice when it falls in idle time: a tickless
// CPU's idle time runs from going idle to running again, and when the
// host is slow to run a vCPU that woke from idle, that wait is idle time
// and steal both. At low load most steal is that, and the wall time less
// idle less steal came out below the benchmark's own processes' time:
// other tasks' time read −20 to −36 ms/s at 4 requests/s with 30-44
// ms/s of steal. So steal is taken out of the time the CPU was not idle
// only as far as that time exceeds the benchmark's own (what is left is
// steal inside idle time), and other tasks' time is never negative. The
// disturbance, steal plus other, is then the larger of steal and the
// not-idle time the benchmark did not use: a host slow to wake the vCPU
// delays the proxy's answers as much as one that takes it while busy.
func (w *WindowRun) setDisturbance(h hostSample, proxy, self, el time.Duration, pinned bool) {
	perS := func(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) / el.Seconds() }
	w.StealMsPerS = ptr(perS(h.proxy.steal))
	cpus := 1
	if !pinned {
		cpus = h.restCPUs + 1
	}
	w.ProxyCPUBusy = ptr(busyShare(h.proxy, h.span, cpus))
	if !pinned {
		return
	}
	w.OtherMsPerS = ptr(perS(otherTime(h.proxy, h.span, 1, proxy)))
	if h.restCPUs > 0 {
		n := time.Duration(h.restCPUs)
		w.GenStealMsPerS = ptr(perS(h.rest.steal / n))
		w.GenCPUBusy = ptr(busyShare(h.rest, h.span, h.restCPUs))
		if self > 0 {
			w.GenOtherMsPerS = ptr(perS(otherTime(h.rest, h.span, h.restCPUs, self) / n))
		}
	}
}

// busyShare is the share of cpus CPUs' time over span that was not idle
// (c their /proc/stat difference), from 0 to 1.
func busyShare(c hostCPU, span time.Duration, cpus int) float64 {
	all := span * time.Duration(cpus)
	if all <= 0 {
		return 0
	}
	return min(max(float64(all-c.idle)/float64(all), 0), 1)
}

// otherTime is what other tasks and interrupts ran on cpus CPUs over
// span besides own: their not-idle time less own, less steal as far as
// steal is not inside the idle time (setDisturbance); never negative.
func otherTime(c hostCPU, span time.Duration, cpus int, own time.Duration) time.Duration {
	return max(span*time.Duration(cpus)-c.idle-own-c.steal, 0)
}

// disturbance is the figure the threshold is compared with: steal plus
// other tasks' time on the proxy's CPU, or per CPU on the generator's,
// whichever is more (0 where unread).
func (w WindowRun) disturbance() float64 {
	v := func(p *float64) float64 {
		if p == nil {
			return 0
		}
		return max(*p, 0)
	}
	return max(v(w.StealMsPerS)+v(w.OtherMsPerS), v(w.GenStealMsPerS)+v(w.GenOtherMsPerS))
}

// DefaultDisturbed is the default threshold (ms per second of window) of
// WindowRun.disturbance above which a window is measured again.
// /proc/stat reports in 10 ms units, so over a 1.5 s window the reading
// itself is uncertain by about ±13 ms/s; BENCHMARKS.md §2 has the quiet
// and loaded readings the value was chosen from.
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
		_, _ = eachThread(fmt.Sprintf("/proc/%d/task", pid), "status", func(b []byte) error {
			n += statusSwitches(b)
			return nil
		})
	}
	return n
}

// statusSwitches reads voluntary_ctxt_switches + nonvoluntary_ctxt_switches
// of a /proc/<pid>/task/<tid>/status text.
func statusSwitches(b []byte) float64 {
	return statusField(b, "voluntary_ctxt_switches") + statusField(b, "nonvoluntary_ctxt_switches")
}

// statusField is the number on the line "key:" of a /proc status text
// (a unit after it, as VmRSS's "kB", is dropped); 0 when the line is
// missing or its value is not a number.
func statusField(status []byte, key string) float64 {
	for line := range bytes.SplitSeq(status, []byte("\n")) {
		k, v, ok := bytes.Cut(line, []byte(":"))
		if !ok || string(k) != key {
			continue
		}
		f := bytes.Fields(v)
		if len(f) == 0 {
			return 0
		}
		n, err := strconv.ParseFloat(string(f[0]), 64)
		if err != nil {
			return 0
		}
		return n
	}
	return 0
}
