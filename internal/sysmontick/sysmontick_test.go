package sysmontick

import (
	"os"
	"os/exec"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"testing"
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
// (exec, not a new process) and GODEBUG with the setting.
func TestEnsureRunsTheProgramAgainWithTheSetting(t *testing.T) {
	if runtime.GOOS == "windows" {
		if err := Ensure(); err != ErrUnsupported {
			t.Fatalf("Ensure on windows: %v, want ErrUnsupported", err)
		}
		return
	}
	for _, tc := range []struct{ godebug, want string }{
		{"", Setting},
		{"gctrace=0", "gctrace=0," + Setting},
		{"schedtrace=600000", "schedtrace=600000"}, // the operator's own value: no exec
	} {
		cmd := exec.Command(os.Args[0])
		cmd.Env = append(os.Environ(), "SYSMONTICK_CHILD=1", "GODEBUG="+tc.godebug)
		out, err := cmd.Output()
		if err != nil {
			t.Fatalf("GODEBUG=%q: %v", tc.godebug, err)
		}
		// The child prints its pid and GODEBUG before Ensure, and again in
		// the program Ensure ran, if it ran one.
		lines := strings.Fields(string(out))
		if len(lines) < 2 {
			t.Fatalf("GODEBUG=%q: child printed %q", tc.godebug, out)
		}
		last := lines[len(lines)-2:]
		if last[1] != "GODEBUG="+tc.want {
			t.Errorf("GODEBUG=%q: the program ran with %s, want GODEBUG=%s", tc.godebug, last[1], tc.want)
		}
		pids := map[string]bool{}
		for _, l := range lines {
			if strings.HasPrefix(l, "pid=") {
				pids[l] = true
			}
		}
		if len(pids) != 1 {
			t.Errorf("GODEBUG=%q: pids %v, want one (exec keeps the process)", tc.godebug, pids)
		}
	}
}

// TestMain is the child's program when SYSMONTICK_CHILD is set: it prints
// its pid and GODEBUG, then calls Ensure unless the setting is there.
func TestMain(m *testing.M) {
	if os.Getenv("SYSMONTICK_CHILD") != "1" {
		os.Exit(m.Run())
	}
	os.Stdout.WriteString("pid=" + strconv.Itoa(os.Getpid()) + " GODEBUG=" + os.Getenv("GODEBUG") + "\n")
	if !Has(os.Getenv("GODEBUG")) {
		if err := Ensure(); err != nil {
			os.Stdout.WriteString("error=" + err.Error() + "\n")
			os.Exit(1)
		}
		os.Stdout.WriteString("error=Ensure returned without running the program again\n")
		os.Exit(1)
	}
	os.Exit(0)
}
