package overhead

import (
	"errors"
	"io"
	"math"
	"net/http"
	"net/http/httptest"
	"os"
	"slices"
	"testing"
	"time"
)

const procStatText = `cpu  12000 50 3000 900000 200 0 700 600 0 0
cpu0 5000 20 1500 450000 100 0 300 400 0 0
cpu1 7000 30 1500 450000 100 0 400 200 0 0
intr 123
ctxt 456
`

func TestParseProcStat(t *testing.T) {
	tick := 10 * time.Millisecond
	cpu0 := hostCPU{idle: (450000 + 100) * tick, steal: 400 * tick}
	cpu1 := hostCPU{idle: (450000 + 100) * tick, steal: 200 * tick}
	for _, tc := range []struct {
		cpu  int
		want hostSample
	}{
		{0, hostSample{proxy: cpu0, rest: cpu1, restCPUs: 1}},
		{1, hostSample{proxy: cpu1, rest: cpu0, restCPUs: 1}},
		{-1, hostSample{proxy: hostCPU{idle: (900000 + 200) * tick, steal: 600 * tick}}},
	} {
		got, err := parseProcStat([]byte(procStatText), tc.cpu)
		if err != nil || got != tc.want {
			t.Errorf("cpu %d: %+v, %v; want %+v", tc.cpu, got, err, tc.want)
		}
	}
	if _, err := parseProcStat([]byte(procStatText), 2); err == nil {
		t.Error("a CPU with no line read without error")
	}
	if _, err := parseProcStat([]byte("cpu0 1 2 x 4 5 6 7 8\n"), 0); err == nil {
		t.Error("a garbled line read without error")
	}
}

// Pinned, the other tasks' time is a CPU's busy time (the wall time less
// idle and steal) less what the benchmark's processes ran there: the
// proxy on its CPU, this process on the generator's, per CPU; not pinned
// only steal is known.
func TestWindowDisturbance(t *testing.T) {
	el := 1500 * time.Millisecond
	t0 := time.Now()
	before := hostSample{at: t0, restCPUs: 2}
	after := hostSample{at: t0.Add(el), restCPUs: 2,
		proxy: hostCPU{idle: 1170 * time.Millisecond, steal: 30 * time.Millisecond},
		rest:  hostCPU{idle: 0, steal: 300 * time.Millisecond}}
	h := after.sub(before)
	if h.span != el {
		t.Fatalf("span %v, want %v", h.span, el)
	}
	var w WindowRun
	w.setDisturbance(h, 225*time.Millisecond, 2400*time.Millisecond, el, true)
	// proxy's CPU: 1500 - 1170 - 30 = 300 ms busy, 75 not the proxy's;
	// the generator's two: 3000 - 300 = 2700 busy, 300 not this process's.
	if *w.StealMsPerS != 20 || *w.OtherMsPerS != 50 || *w.GenStealMsPerS != 100 || *w.GenOtherMsPerS != 100 {
		t.Errorf("pinned: steal %v other %v, generator's %v %v; want 20, 50, 100, 100", *w.StealMsPerS, *w.OtherMsPerS, *w.GenStealMsPerS, *w.GenOtherMsPerS)
	}
	if d := w.disturbance(); d != 200 {
		t.Errorf("disturbance %v, want the generator's 200", d)
	}
	// The 10 ms units can leave the proxy's exact time above its CPU's
	// busy time: that is no negative disturbance.
	w = WindowRun{}
	w.setDisturbance(hostSample{span: el, proxy: hostCPU{idle: 1300 * time.Millisecond}}, 210*time.Millisecond, 0, el, true)
	if w.disturbance() != 0 || w.GenStealMsPerS != nil {
		t.Errorf("rounding below zero, no other CPU: disturbance %v, generator's steal %v", w.disturbance(), w.GenStealMsPerS)
	}
	w = WindowRun{}
	w.setDisturbance(h, 225*time.Millisecond, 0, el, false)
	if w.OtherMsPerS != nil || w.GenStealMsPerS != nil || w.disturbance() != 20 {
		t.Errorf("not pinned: %+v", w)
	}
}

// A proxy window the host disturbed is measured again after the rounds
// of windows, the most disturbed first, up to the bound per cell; a rerun
// takes the slot when it is less disturbed, every window stays in the
// cell's record, and the cell says it is still disturbed when a used
// window is. Direct's windows are never rerun.
func TestDisturbedWindowIsRerun(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { _, _ = io.WriteString(w, "{}") }))
	defer srv.Close()
	base := func(int) string { return srv.URL }
	cols := []column{{path: "direct", base: base}, {path: "proxy", base: base, pid: func() []int { return []int{os.Getpid()} }}}
	// Steal each window gets, in the order the windows run (each round
	// starts one column on: direct first in slots 0 and 2, the proxy in
	// slot 1): 0 is quiet, every other value is disturbed whatever the
	// window's length, and the values are 100 times apart so that which
	// is the more disturbed does not hang on how long a loaded machine
	// stretched a window.
	script := []float64{
		0, 1e8, // slot 0: direct, proxy disturbed (the most)
		1e6, 1e8, // slot 1: proxy disturbed, direct disturbed (not rerun)
		0, 1e4, // slot 2: proxy disturbed (the least)
		0,   // rerun of slot 0: quiet, takes the slot
		1e2, // rerun of slot 1, now the most disturbed: less so, takes it; the bound of 2 is spent
	}
	var steal time.Duration
	calls := 0
	host := func() (hostSample, error) {
		if calls%2 == 1 { // a window's end
			steal += time.Duration(script[calls/2] * float64(time.Second))
		}
		calls++
		return hostSample{proxy: hostCPU{steal: steal}}, nil
	}
	cfg := Config{Rate: 200, Duration: 50 * time.Millisecond, Windows: 3, SearchStart: 2, SearchMax: 1, SearchFactor: 2,
		PromptWords: 4, MaxTokens: 1, Disturbed: DefaultDisturbed, Reruns: 2, host: host}
	cells := measure(t.Context(), cfg, cols, "plain")
	if calls != 2*len(script) {
		t.Fatalf("%d windows ran, want %d", calls/2, len(script))
	}
	if d := cells[0]; len(d.runs) != 3 || d.reruns != 0 || !slices.Equal(slots(d.used()), []int{0, 1, 2}) {
		t.Errorf("direct: %d runs, %d reruns, used slots %v", len(d.runs), d.reruns, slots(d.used()))
	}
	p := cells[1]
	if len(p.runs) != 5 || p.reruns != 2 {
		t.Fatalf("proxy: %d runs, %d reruns; want 5, 2", len(p.runs), p.reruns)
	}
	wantSlot := []int{0, 1, 2, 0, 1}
	wantUsed := []bool{false, false, true, true, true}
	wantDisturbed := []bool{true, true, true, false, true}
	for i, w := range p.runs {
		if w.Slot != wantSlot[i] || w.Used != wantUsed[i] || w.Disturbed != wantDisturbed[i] {
			t.Errorf("proxy window %d: slot %d used %v disturbed %v; want %d, %v, %v", i, w.Slot, w.Used, w.Disturbed, wantSlot[i], wantUsed[i], wantDisturbed[i])
		}
	}
	if !slices.Equal(slots(p.used()), []int{0, 1, 2}) || p.fixed.sent != 30 {
		t.Errorf("used slots %v over %d requests; want one per slot, 30 requests", slots(p.used()), p.fixed.sent)
	}
	var r Row
	summarise(&r, p.used())
	if !r.Disturbed || len(r.CPUPer1kWindows) != 3 || r.StealMsPerS == nil || *r.StealMsPerS <= DefaultDisturbed {
		t.Errorf("row: disturbed %v, %d windows, steal %v", r.Disturbed, len(r.CPUPer1kWindows), r.StealMsPerS)
	}
	// With no threshold nothing is rerun.
	calls, steal = 0, 0
	cfg.Disturbed = 0
	script = script[:6]
	cells = measure(t.Context(), cfg, cols, "plain")
	if len(cells[1].runs) != 3 || cells[1].reruns != 0 || cells[1].runs[0].Disturbed {
		t.Errorf("threshold 0: %d runs, %d reruns", len(cells[1].runs), cells[1].reruns)
	}
}

func slots(ws []WindowRun) []int {
	var out []int
	for _, w := range ws {
		out = append(out, w.Slot)
	}
	return out
}

func TestStatusSwitches(t *testing.T) {
	st := "Name:\trolter\nState:\tS (sleeping)\nvoluntary_ctxt_switches:\t1200\nnonvoluntary_ctxt_switches:\t34\n"
	if got := statusSwitches([]byte(st)); got != 1234 {
		t.Errorf("%v switches, want 1234", got)
	}
	self := func() []int { return []int{os.Getpid()} }
	if n := ctxSwitches(self); n <= 0 {
		t.Errorf("this process's threads switched %v times", n)
	}
}

// A negative bisection count, rerun bound or threshold is refused before
// anything starts.
func TestConfigRefusesNegativeRerunsAndBisections(t *testing.T) {
	ok := Config{Rate: 1, Duration: time.Second, Windows: 1, SearchStart: 1, SearchFactor: 1.5, SearchDuration: time.Second,
		Engine: EngineCanned, Targets: []int{1}, Modes: []string{"plain"}, MaxTokens: 1, WorkDir: t.TempDir()}
	if err := ok.check(); err != nil {
		t.Fatalf("a usable config refused: %v", err)
	}
	for name, bad := range map[string]func(*Config){
		"bisect":    func(c *Config) { c.SearchBisect = -1 },
		"reruns":    func(c *Config) { c.Reruns = -1 },
		"disturbed": func(c *Config) { c.Disturbed = -5 },
	} {
		c := ok
		bad(&c)
		if err := c.check(); !errors.Is(err, ErrConfig) {
			t.Errorf("negative %s: %v", name, err)
		}
	}
}

// Steal that falls in idle time is counted as both by the kernel, so at
// low load steal can exceed a CPU's not-idle time less the benchmark's
// own: other tasks' time is then 0, not negative, and the disturbance is
// the steal. The first pair is /proc/stat read 5.01 s apart on the
// benchmark's machine (nothing of the benchmark running): CPU 0's fields
// sum to 510 ticks in 501, 9 over, with 8 ticks of steal. The second is
// a 1.5 s window at 4 requests/s as the long-prompt runs read it: 40
// ms/s of steal, the proxy's 1 ms/s, and the CPU not idle 15 ms/s.
func TestStealInsideIdleTimeIsNoNegativeOtherTime(t *testing.T) {
	before := "cpu0 2891254 83013 482242 1439252 3229 0 60915 9838 0 0\ncpu1 2898785 74847 525874 1367629 2415 0 75548 10130 0 0\n"
	after := "cpu0 2891573 83013 482277 1439387 3230 0 60927 9846 0 0\ncpu1 2899120 74847 525906 1367748 2415 0 75558 10133 0 0\n"
	h0, err0 := parseProcStat([]byte(before), 0)
	h1, err1 := parseProcStat([]byte(after), 0)
	if err0 != nil || err1 != nil {
		t.Fatal(err0, err1)
	}
	el := 5010 * time.Millisecond
	h0.at, h1.at = time.Unix(0, 0), time.Unix(0, 0).Add(el)
	h := h1.sub(h0)
	// CPU 0: not idle 5010 - 1360 = 3650 ms, 80 of steal; a proxy that ran
	// 3600 of it leaves the other tasks nothing, not -30 ms.
	var w WindowRun
	w.setDisturbance(h, 3600*time.Millisecond, 3700*time.Millisecond, el, true)
	if *w.OtherMsPerS != 0 || math.Abs(*w.StealMsPerS-80/el.Seconds()) > 1e-9 {
		t.Errorf("recorded: other %v, steal %v ms/s; want 0 and %v", *w.OtherMsPerS, *w.StealMsPerS, 80/el.Seconds())
	}
	if want := 3650.0 / 5010; math.Abs(*w.ProxyCPUBusy-want) > 1e-9 {
		t.Errorf("proxy's CPU busy %v, want %v", *w.ProxyCPUBusy, want)
	}
	// CPU 1: not idle 5010 - 1190 = 3820 ms, 30 of steal; this process's
	// 3700 leaves 90 ms to the others.
	if want := 90 / el.Seconds(); math.Abs(*w.GenOtherMsPerS-want) > 1e-9 || math.Abs(*w.GenCPUBusy-3820.0/5010) > 1e-9 {
		t.Errorf("generator's CPU: other %v ms/s, busy %v; want %v, %v", *w.GenOtherMsPerS, *w.GenCPUBusy, want, 3820.0/5010)
	}

	el = 1500 * time.Millisecond
	low := hostSample{span: el, restCPUs: 1,
		proxy: hostCPU{idle: el - 22500*time.Microsecond, steal: 60 * time.Millisecond},
		rest:  hostCPU{idle: el - 30*time.Millisecond, steal: 15 * time.Millisecond}}
	w = WindowRun{}
	w.setDisturbance(low, 1500*time.Microsecond, 10*time.Millisecond, el, true)
	if *w.OtherMsPerS != 0 || *w.StealMsPerS != 40 || w.disturbance() != 40 {
		t.Errorf("low load: other %v, steal %v, disturbance %v; want 0, 40, 40", *w.OtherMsPerS, *w.StealMsPerS, w.disturbance())
	}
	// generator's CPU: 30 ms not idle, 15 steal, 10 this process's: 5 ms
	// in 1.5 s is other tasks'.
	if math.Abs(*w.GenOtherMsPerS-5/1.5) > 1e-9 {
		t.Errorf("low load, generator's other %v ms/s, want %v", *w.GenOtherMsPerS, 5/1.5)
	}
}
