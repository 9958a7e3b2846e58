package overhead

import (
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"
)

func TestParseSchedstat(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want schedstat
		bad  bool
	}{
		{in: "839395 1705725 47\n", want: schedstat{839395, 1705725}},
		{in: "123456789012 0 1", want: schedstat{123456789012, 0}},
		{in: "", bad: true},
		{in: "12 34", bad: true},
		{in: "x 1 2", bad: true},
		{in: "1 y 2", bad: true},
		{in: "-5 1 2", bad: true},
	} {
		got, err := parseSchedstat([]byte(tc.in))
		if (err != nil) != tc.bad || got != tc.want {
			t.Errorf("%q: %v, %v; want %v (error %v)", tc.in, got, err, tc.want, tc.bad)
		}
	}
}

// The threads' nanoseconds add up; a thread whose file is gone (it exited
// after the listing) is skipped, not an error.
func TestTaskSchedstatSumsTheThreads(t *testing.T) {
	dir := t.TempDir()
	for tid, content := range map[string]string{"100": "1500000000 20 30\n", "101": "250000 1 2\n", "102": ""} {
		if err := os.MkdirAll(filepath.Join(dir, tid), 0o755); err != nil {
			t.Fatal(err)
		}
		if content != "" {
			if err := os.WriteFile(filepath.Join(dir, tid, "schedstat"), []byte(content), 0o644); err != nil {
				t.Fatal(err)
			}
		}
	}
	got, err := taskSchedstat(dir)
	if err != nil || got != (schedstat{1500250000, 21}) {
		t.Fatalf("sum %v, %v; want 1.50025s on CPU, 21ns waiting", got, err)
	}
	if _, err := taskSchedstat(filepath.Join(dir, "102")); err == nil {
		t.Error("a directory with no readable thread gave no error")
	}
}

// The per-process CPU clock reads this process's time on CPU: at least
// what its live threads' schedstat files say a moment before (it also
// keeps exited threads' time), and not some other clock.
func TestProcessClockReadsTheProcessCPUTime(t *testing.T) {
	threads, err := taskSchedstat("/proc/self/task")
	if err != nil {
		t.Fatal(err)
	}
	clock, err := processClock(os.Getpid())
	if err != nil {
		t.Fatal(err)
	}
	if clock < threads.run || clock-threads.run > time.Second {
		t.Fatalf("process clock %v, threads' schedstat %v a moment before", clock, threads)
	}
	// Burn some CPU: the clock moves by about as much as the thread ran.
	t0 := clock
	deadline := time.Now().Add(50 * time.Millisecond)
	x := 0
	for time.Now().Before(deadline) {
		x++
	}
	after, _ := processClock(os.Getpid())
	if after-t0 < time.Millisecond {
		t.Fatalf("clock moved %v over a 50 ms busy loop (%d turns)", after-t0, x)
	}
	u := readCPU(func() []int { return []int{os.Getpid()} })
	if u.Exact < after || u.Ticks <= 0 {
		t.Fatalf("readCPU %+v after the clock read %v", u, after)
	}
}

// Another process's clock reads too (the proxies are children), and a
// process that has gone is an error, not a zero.
func TestProcessClockOfAChild(t *testing.T) {
	cmd := exec.Command("sleep", "5")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	pid := cmd.Process.Pid
	d, err := processClock(pid)
	if err != nil || d < 0 || d > time.Second {
		t.Fatalf("a sleeping child's CPU clock: %v, %v", d, err)
	}
	_ = cmd.Process.Kill()
	_ = cmd.Wait()
	if _, err := processClock(pid); err == nil {
		t.Error("a reaped child's clock read without error")
	}
}

func TestMedianOfWindows(t *testing.T) {
	in := []float64{0.30, 0.10, 0.20}
	if m := median(in); m != 0.20 {
		t.Errorf("median %v, want 0.2", m)
	}
	if in[0] != 0.30 {
		t.Error("median reordered its input, which the JSON reports in window order")
	}
	if m := median([]float64{4, 1, 3, 2}); m != 2.5 {
		t.Errorf("even count: %v, want 2.5", m)
	}
	if m := median(nil); m != 0 {
		t.Errorf("none: %v", m)
	}
}

// Pooled windows are one distribution: counts add up and the
// percentiles are over every request.
func TestPoolMergesWindows(t *testing.T) {
	ms := func(vs ...int) []time.Duration {
		out := make([]time.Duration, len(vs))
		for i, v := range vs {
			out[i] = time.Duration(v) * time.Millisecond
		}
		return out
	}
	a := loadStats{sent: 3, errors: 1, lat: ms(1, 2, 3)}
	b := loadStats{sent: 2, lat: ms(10, 20), behind: time.Millisecond}
	p := pool([]loadStats{a, b})
	if p.sent != 5 || p.errors != 1 || p.behind != time.Millisecond || p.p50 != 3*time.Millisecond || p.p999 != 20*time.Millisecond {
		t.Fatalf("pooled %+v", p)
	}
}

func TestVmRSS(t *testing.T) {
	st := "Name:\trolter\nVmPeak:\t  2000 kB\nVmRSS:\t   36048 kB\nRssAnon:\t 20000 kB\n"
	if got := vmRSS(st); got != 36048 {
		t.Errorf("VmRSS %v, want 36048", got)
	}
	if got := vmRSS("Name:\tx\n"); got != 0 {
		t.Errorf("no VmRSS line: %v", got)
	}
}

// The cell's CPU figure leaves one high and one low window out, whatever
// their size, and does not reorder the windows the JSON reports.
func TestTrimmedMeanOfWindows(t *testing.T) {
	in := []float64{0.9, 0.10, 0.12, 0.11, 0.01}
	if m := trimmedMean(in); math.Abs(m-0.11) > 1e-12 {
		t.Errorf("trimmed mean %v, want 0.11", m)
	}
	if in[0] != 0.9 {
		t.Error("trimmedMean reordered its input")
	}
	if m := trimmedMean([]float64{1, 3}); m != 2 {
		t.Errorf("two windows: %v, want their mean", m)
	}
	if m := trimmedMean(nil); m != 0 {
		t.Errorf("none: %v", m)
	}
}
