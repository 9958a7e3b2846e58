package e2e

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/openai/openai-go"
	"github.com/openai/openai-go/option"

	"github.com/rolter/rolter/demo"
	"github.com/rolter/rolter/internal/testwait"
	"github.com/rolter/rolter/localfleet"
)

// demoOutput collects a running demo's stdout line by line.
type demoOutput struct {
	mu    sync.Mutex
	lines []string
	done  chan struct{} // closed at EOF
}

func (o *demoOutput) read(sc *bufio.Scanner) {
	defer close(o.done)
	for sc.Scan() {
		o.mu.Lock()
		o.lines = append(o.lines, sc.Text())
		o.mu.Unlock()
	}
}

func (o *demoOutput) text() string {
	o.mu.Lock()
	defer o.mu.Unlock()
	return strings.Join(o.lines, "\n")
}

// match returns the first submatch of re in the output so far.
func (o *demoOutput) match(re *regexp.Regexp) (string, bool) {
	m := re.FindStringSubmatch(o.text())
	if m == nil {
		return "", false
	}
	return m[1], true
}

var (
	demoReadyRE = regexp.MustCompile(`(?m)^rolter demo ready in ([0-9.]+)s`)
	demoAPIRE   = regexp.MustCompile(`(?m)^  API\s+(http://\S+)$`)
	demoAdminRE = regexp.MustCompile(`(?m)^  admin\s+(http://\S+)/api/v1/`)
	demoTokenRE = regexp.MustCompile(`(?m)^  token\s+(\S+)$`)
	demoDirRE   = regexp.MustCompile(`(?m)^rolter demo: starting .* in (\S+)$`)
)

// freeDemoBase returns a --base-port whose whole range is free now and
// is held by no other test process on the machine, trying a deterministic
// sequence of bases derived from the pid. The bases stay below Linux's
// ephemeral range (32768 up), where other processes' outgoing connections
// could take a port between the check and the demo's bind. Two test runs
// (two worktrees, say) whose pids agree mod 100 try the same bases, and
// the demo's children bind theirs seconds after its check: each run takes
// a lock on its range (demoRangeLock) before checking it, so the other
// moves on.
func freeDemoBase(t *testing.T) int {
	t.Helper()
	start := 12000 + (os.Getpid()%100)*200
	for i := range 50 {
		base := start + i*200
		if base+200 > 32000 {
			base -= 20000
		}
		unlock, ok := demoRangeLock(t, base)
		if !ok {
			continue
		}
		if localfleet.Check(demo.Plan(base).Ports()) == nil {
			t.Cleanup(unlock)
			return base
		}
		unlock()
	}
	t.Fatal("no free port range for the demo")
	return 0
}

// demoRangeLock takes a write lock on byte base of a file every test
// process on the machine shares (POSIX record locks: released with the
// file, also when the process dies); false when another process holds it.
func demoRangeLock(t *testing.T, base int) (unlock func(), ok bool) {
	t.Helper()
	f, err := os.OpenFile(filepath.Join(os.TempDir(), "rolter-e2e-demo-ports.lock"), os.O_CREATE|os.O_RDWR, 0o666)
	if err != nil {
		t.Fatal(err)
	}
	lk := syscall.Flock_t{Type: syscall.F_WRLCK, Whence: 0, Start: int64(base), Len: 1}
	if err := syscall.FcntlFlock(f.Fd(), syscall.F_SETLK, &lk); err != nil {
		f.Close()
		return nil, false
	}
	return func() { f.Close() }, true
}

// childPIDs lists the processes whose parent is pid (Linux /proc).
func childPIDs(t *testing.T, pid int) []int {
	t.Helper()
	dirs, err := filepath.Glob("/proc/[0-9]*/stat")
	if err != nil {
		t.Fatal(err)
	}
	var out []int
	for _, f := range dirs {
		b, err := os.ReadFile(f)
		if err != nil {
			continue // exited meanwhile
		}
		// pid (comm) state ppid …; comm may hold spaces, so cut at the last ')'.
		i := bytes.LastIndexByte(b, ')')
		if i < 0 {
			continue
		}
		fields := strings.Fields(string(b[i+1:]))
		if len(fields) < 2 {
			continue
		}
		if ppid, _ := strconv.Atoi(fields[1]); ppid == pid {
			c, _ := strconv.Atoi(filepath.Base(filepath.Dir(f)))
			out = append(out, c)
		}
	}
	return out
}

func startDemo(t *testing.T, ctx context.Context, tmp string, args ...string) (*exec.Cmd, *demoOutput, *bytes.Buffer) {
	t.Helper()
	cmd := exec.CommandContext(ctx, SharedRolter(t, false).Path, append([]string{"demo"}, args...)...)
	cmd.Env = append(os.Environ(), "TMPDIR="+tmp)
	// On timeout, Ctrl-C rather than SIGKILL, so the demo stops its own
	// children; SIGKILL only if it has not exited 15 s later.
	cmd.Cancel = func() error { return cmd.Process.Signal(os.Interrupt) }
	cmd.WaitDelay = 15 * time.Second
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	pipe, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	out := &demoOutput{done: make(chan struct{})}
	go out.read(bufio.NewScanner(pipe))
	return cmd, out, &stderr
}

// TestDemo is issue 9's e2e acceptance: `rolter demo` comes up, its
// printed API URL serves a streamed chat completion, GET /api/v1/cluster
// shows three routers and four engines, a second demo on the same ports
// fails at once naming the busy port, and SIGINT stops every child and
// removes the temp dir.
func TestDemo(t *testing.T) {
	if testing.Short() {
		t.Skip("starts eleven processes")
	}
	if _, err := os.Stat("/proc/self/stat"); err != nil {
		t.Skip("needs Linux /proc to check the children")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 120*time.Second)
	defer cancel()
	base := freeDemoBase(t)
	tmp := t.TempDir()
	cmd, out, stderr := startDemo(t, ctx, tmp, "--base-port", strconv.Itoa(base), "--ready-timeout", "60s")
	exited := make(chan struct{})
	var waitErr error
	go func() { <-out.done; waitErr = cmd.Wait(); close(exited) }()
	t.Cleanup(func() { // a failed test still stops the demo and its children
		_ = cmd.Process.Signal(os.Interrupt)
		select {
		case <-exited:
		case <-time.After(20 * time.Second):
			_ = cmd.Process.Kill()
		}
	})

	var ready string
	err := testwait.Poll(75*time.Second, 100*time.Millisecond, func() error {
		select {
		case <-exited:
			t.Fatalf("demo exited before it was ready: %v\nstdout:\n%s\nstderr:\n%s", waitErr, out.text(), stderr)
		default:
		}
		var ok bool
		if ready, ok = out.match(demoReadyRE); !ok {
			return errors.New("no 'ready' line yet")
		}
		// The block after the ready line arrives in several writes; the
		// token is its last line the test reads.
		if _, ok = out.match(demoTokenRE); !ok {
			return errors.New("no token line yet")
		}
		return nil
	})
	if err != nil {
		t.Fatalf("%v\nstdout:\n%s\nstderr:\n%s", err, out.text(), stderr)
	}
	t.Logf("demo on --base-port %d ready in %ss (the demo's own measure)", base, ready)
	api, okAPI := out.match(demoAPIRE)
	admin, okAdmin := out.match(demoAdminRE)
	token, okToken := out.match(demoTokenRE)
	dir, okDir := out.match(demoDirRE)
	if !okAPI || !okAdmin || !okToken || !okDir {
		t.Fatalf("missing API URL, admin URL, token or temp dir in the output:\n%s", out.text())
	}
	if !strings.HasPrefix(dir, tmp) {
		t.Fatalf("state dir %s is not under $TMPDIR %s", dir, tmp)
	}

	t.Run("streamed chat through the printed API URL", func(t *testing.T) {
		client := openai.NewClient(option.WithBaseURL(api+"/"), option.WithAPIKey("unused"), option.WithMaxRetries(0))
		stream := client.Chat.Completions.NewStreaming(ctx, openai.ChatCompletionNewParams{
			Model:     "chat",
			Messages:  []openai.ChatCompletionMessageParamUnion{openai.UserMessage("hello from the demo test")},
			MaxTokens: openai.Int(16),
		})
		var text strings.Builder
		chunks := 0
		for stream.Next() {
			chunks++
			if c := stream.Current(); len(c.Choices) > 0 {
				text.WriteString(c.Choices[0].Delta.Content)
			}
		}
		if err := stream.Err(); err != nil {
			t.Fatalf("stream: %v", err)
		}
		if chunks < 2 || text.Len() == 0 {
			t.Fatalf("got %d chunks and text %q", chunks, text.String())
		}
	})

	t.Run("cluster shows three routers and four engines", func(t *testing.T) {
		var last demo.Cluster
		err := testwait.Poll(20*time.Second, 100*time.Millisecond, func() error {
			code, body, err := Do(ctx, http.MethodGet, admin+"/api/v1/cluster", token, "")
			if err != nil {
				return err
			}
			if code != http.StatusOK {
				return fmt.Errorf("GET /api/v1/cluster: %d %s", code, body)
			}
			last = demo.Cluster{}
			if err := json.Unmarshal(body, &last); err != nil {
				return err
			}
			var routers, engines []string
			leaders := 0
			for _, r := range last.Routers {
				routers = append(routers, r.NodeID)
				if r.RaftRole == "leader" {
					leaders++
				}
			}
			for _, e := range last.Engines {
				engines = append(engines, e.NodeID)
			}
			slices.Sort(routers)
			slices.Sort(engines)
			if !slices.Equal(routers, []string{"r1", "r2", "r3"}) || leaders != 1 || last.Leader == "" {
				return fmt.Errorf("routers %v with %d leaders (leader %q)", routers, leaders, last.Leader)
			}
			if !slices.Equal(engines, []string{"engine-1", "engine-2", "engine-3", "engine-4"}) {
				return fmt.Errorf("engines %v", engines)
			}
			return nil
		})
		if err != nil {
			t.Fatalf("%v (last %+v)", err, last)
		}
	})

	t.Run("a second demo on the same ports fails fast", func(t *testing.T) {
		ctx2, cancel2 := context.WithTimeout(ctx, 20*time.Second)
		defer cancel2()
		second, out2, stderr2 := startDemo(t, ctx2, tmp, "--base-port", strconv.Itoa(base))
		<-out2.done
		err := second.Wait()
		if ctx2.Err() != nil {
			t.Fatalf("the second demo hung instead of failing: %s", stderr2)
		}
		var ee *exec.ExitError
		if !errors.As(err, &ee) || ee.ExitCode() != 1 {
			t.Fatalf("second demo: %v, want exit code 1\nstdout:\n%s\nstderr:\n%s", err, out2.text(), stderr2)
		}
		busy := fmt.Sprintf("tcp 127.0.0.1:%d (r1 API", base)
		if msg := stderr2.String(); !strings.Contains(msg, busy) || !strings.Contains(msg, "already in use") || !strings.Contains(msg, "--base-port") {
			t.Fatalf("second demo's message does not name the busy port %s and --base-port:\n%s", busy, msg)
		}
		if strings.Contains(out2.text(), "starting") {
			t.Fatalf("second demo started something:\n%s", out2.text())
		}
	})

	children := childPIDs(t, cmd.Process.Pid)
	if len(children) != demo.Routers+2*demo.Engines {
		t.Errorf("demo has %d children, want %d routers + %d engines + %d sidecars", len(children), demo.Routers, demo.Engines, demo.Engines)
	}
	if err := cmd.Process.Signal(os.Interrupt); err != nil {
		t.Fatal(err)
	}
	select {
	case <-exited:
		if waitErr != nil {
			t.Fatalf("demo after SIGINT: %v\nstderr:\n%s", waitErr, stderr)
		}
	case <-time.After(30 * time.Second):
		t.Fatalf("demo still running 30s after SIGINT:\n%s", out.text())
	}
	for _, pid := range children {
		if err := syscall.Kill(pid, 0); !errors.Is(err, syscall.ESRCH) {
			t.Errorf("child %d still exists after the demo exited (kill 0: %v)", pid, err)
		}
	}
	if _, err := os.Stat(dir); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("state dir %s still there after exit: %v", dir, err)
	}
	if !strings.Contains(out.text(), "removed "+dir) {
		t.Errorf("no 'removed %s' in the output:\n%s", dir, out.text())
	}
	t.Logf("shutdown: %s", out.text()[strings.LastIndex(out.text(), "rolter demo: stopped"):])
}
