package sysmontick

import (
	"os"
	"os/exec"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"
)

func TestHas(t *testing.T) {
	for godebug, want := range map[string]bool{
		"":                             false,
		"gctrace=1":                    false,
		"schedtrace=1000":              true,
		"gctrace=1, schedtrace=5":      true,
		"scheddetail=1,madvdontneed=1": false,
	} {
		if got := Has(godebug); got != want {
			t.Errorf("Has(%q) = %v, want %v", godebug, got, want)
		}
	}
}

func TestWithSettingKeepsTheOperatorsGODEBUG(t *testing.T) {
	env := withSetting([]string{"HOME=/h", "GODEBUG=gctrace=1", "X=y"}, "gctrace=1")
	want := []string{"HOME=/h", "X=y", "GODEBUG=gctrace=1," + Setting}
	if !slices.Equal(env, want) {
		t.Fatalf("got %q, want %q", env, want)
	}
	if env := withSetting([]string{"A=b"}, ""); !slices.Equal(env, []string{"A=b", "GODEBUG=" + Setting}) {
		t.Fatalf("got %q", env)
	}
}

// TestEnsureRunsTheProgramAgainWithTheSetting runs this test binary as a
// child that calls Ensure and prints what it then runs with: the same pid
// (exec, not a new process), GODEBUG with the setting and, on Linux, the
// timer slack Ensure was given on every one of its threads.
func TestEnsureRunsTheProgramAgainWithTheSetting(t *testing.T) {
	if runtime.GOOS == "windows" {
		if err := Ensure(0); err != ErrUnsupported {
			t.Fatalf("Ensure on windows: %v, want ErrUnsupported", err)
		}
		return
	}
	for _, tc := range []struct {
		godebug, want string
		execs         bool
	}{
		{"", Setting, true},
		{"gctrace=0", "gctrace=0," + Setting, true},
		{"schedtrace=600000", "schedtrace=600000", false}, // the operator's own value: no exec
	} {
		cmd := exec.Command(os.Args[0])
		cmd.Env = append(os.Environ(), "SYSMONTICK_CHILD=1", "GODEBUG="+tc.godebug)
		out, err := cmd.Output()
		if err != nil {
			t.Fatalf("GODEBUG=%q: %v", tc.godebug, err)
		}
		// The child prints a line before Ensure, and another in the
		// program Ensure ran, if it ran one: pid=, slack=, GODEBUG=.
		lines := strings.Split(strings.TrimSpace(string(out)), "\n")
		if want := map[bool]int{true: 2, false: 1}[tc.execs]; len(lines) != want {
			t.Fatalf("GODEBUG=%q: child printed %q, want %d lines", tc.godebug, out, want)
		}
		first, last := strings.Fields(lines[0]), strings.Fields(lines[len(lines)-1])
		if len(first) != 3 || len(last) != 3 {
			t.Fatalf("GODEBUG=%q: child printed %q", tc.godebug, out)
		}
		if last[2] != "GODEBUG="+tc.want {
			t.Errorf("GODEBUG=%q: the program ran with %s, want GODEBUG=%s", tc.godebug, last[2], tc.want)
		}
		if first[0] != last[0] {
			t.Errorf("GODEBUG=%q: pids %s and %s, want one (exec keeps the process)", tc.godebug, first[0], last[0])
		}
		if runtime.GOOS == "linux" {
			want := "slack=" + strconv.FormatInt(childSlack.Nanoseconds(), 10)
			if tc.execs && last[1] != want {
				t.Errorf("GODEBUG=%q: the program's threads have %s, want %s", tc.godebug, last[1], want)
			}
			if !tc.execs && last[1] == want {
				t.Errorf("GODEBUG=%q: the slack was set without an exec", tc.godebug)
			}
		}
	}
}

// childSlack is the timer slack the child asks Ensure for.
const childSlack = 20 * time.Millisecond

// threadSlacks is the distinct timer slacks of the process's threads in
// nanoseconds, comma-separated (Linux; "-" elsewhere).
func threadSlacks() string {
	tids, err := os.ReadDir("/proc/self/task")
	if err != nil {
		return "-"
	}
	var slacks []string
	for _, tid := range tids {
		b, err := os.ReadFile("/proc/" + tid.Name() + "/timerslack_ns")
		if err != nil {
			return "-"
		}
		if v := strings.TrimSpace(string(b)); !slices.Contains(slacks, v) {
			slacks = append(slacks, v)
		}
	}
	slices.Sort(slacks)
	return strings.Join(slacks, ",")
}

// TestMain is the child's program when SYSMONTICK_CHILD is set: it prints
// its pid and GODEBUG, then calls Ensure unless the setting is there.
func TestMain(m *testing.M) {
	if os.Getenv("SYSMONTICK_CHILD") != "1" {
		os.Exit(m.Run())
	}
	os.Stdout.WriteString("pid=" + strconv.Itoa(os.Getpid()) + " slack=" + threadSlacks() + " GODEBUG=" + os.Getenv("GODEBUG") + "\n")
	if !Has(os.Getenv("GODEBUG")) {
		if err := Ensure(childSlack); err != nil {
			os.Stdout.WriteString("error=" + err.Error() + "\n")
			os.Exit(1)
		}
		os.Stdout.WriteString("error=Ensure returned without running the program again\n")
		os.Exit(1)
	}
	os.Exit(0)
}
