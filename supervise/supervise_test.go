package supervise

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"os/signal"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// The test binary doubles as the child: with childEnv set it runs the
// named behaviour instead of the tests.
const childEnv = "SUPERVISE_TEST_CHILD"

func TestMain(m *testing.M) {
	if mode := os.Getenv(childEnv); mode != "" {
		os.Exit(child(mode, os.Args[1:]))
	}
	os.Exit(m.Run())
}

func child(mode string, args []string) int {
	switch mode {
	case "serve": // answer GET / on args[0] until SIGTERM, then exit 0
		ln, err := net.Listen("tcp", args[0])
		if err != nil {
			fmt.Println("listen:", err)
			return 1
		}
		fmt.Println("serving on", ln.Addr())
		go func() { _ = http.Serve(ln, http.HandlerFunc(func(http.ResponseWriter, *http.Request) {})) }()
		sig := make(chan os.Signal, 1)
		signal.Notify(sig, syscall.SIGTERM)
		<-sig
		fmt.Println("got SIGTERM")
		return 0
	case "stubborn": // ignore SIGTERM, start a grandchild that ignores it too, print its pid
		signal.Ignore(syscall.SIGTERM)
		gc := exec.Command(os.Args[0])
		gc.Env = append(os.Environ(), childEnv+"=sleep")
		if err := gc.Start(); err != nil {
			fmt.Println("grandchild:", err)
			return 1
		}
		fmt.Println("grandchild", gc.Process.Pid)
		time.Sleep(time.Hour)
		return 0
	case "hup": // print the pid's group, exit 0 on SIGHUP; SIGTERM is ignored
		signal.Ignore(syscall.SIGTERM)
		sig := make(chan os.Signal, 1)
		signal.Notify(sig, syscall.SIGHUP)
		fmt.Println("pgrp", syscall.Getpgrp(), "args", strings.Join(args, " "))
		<-sig
		fmt.Println("got SIGHUP")
		return 0
	case "sleep":
		signal.Ignore(syscall.SIGTERM)
		time.Sleep(time.Hour)
		return 0
	case "fail":
		fmt.Println("level=ERROR msg=\"cannot start\" why=test")
		return 3
	}
	return 2
}

func testGroup(t *testing.T, mode string) *Group {
	t.Helper()
	t.Setenv(childEnv, mode)
	g := &Group{Bin: os.Args[0], LogDir: t.TempDir()}
	t.Cleanup(func() { g.StopAll(time.Second) })
	return g
}

func freeAddr(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().String()
}

func TestReadyThenGracefulStop(t *testing.T) {
	g := testGroup(t, "serve")
	addr := freeAddr(t)
	p, err := g.Start("web", addr)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if err := g.WaitReady(ctx, "web answers", HTTPOK(&http.Client{Timeout: time.Second}, "http://"+addr+"/")); err != nil {
		t.Fatal(err)
	}
	if killed := g.StopAll(10 * time.Second); killed != 0 {
		t.Fatalf("a child handling SIGTERM was killed (%d)", killed)
	}
	if !p.Exited() || p.Err() != nil {
		t.Fatalf("after StopAll: exited %v, err %v", p.Exited(), p.Err())
	}
	log := p.Tail(1 << 10)
	if !strings.Contains(log, "serving on") || !strings.Contains(log, "got SIGTERM") {
		t.Fatalf("log %s lacks the child's output: %q", p.Log, log)
	}
	if len(g.Procs()) != 0 {
		t.Fatal("StopAll kept children")
	}
}

func TestStubbornGroupIsKilled(t *testing.T) {
	g := testGroup(t, "stubborn")
	p, err := g.Start("stubborn")
	if err != nil {
		t.Fatal(err)
	}
	var grandchild int
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	err = g.WaitReady(ctx, "the grandchild runs", func(context.Context) error {
		f := strings.Fields(p.Tail(256))
		if len(f) == 2 && f[0] == "grandchild" {
			grandchild, _ = strconv.Atoi(f[1])
			return nil
		}
		return errors.New("no pid yet")
	})
	if err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	if !p.Stop(200 * time.Millisecond) {
		t.Fatal("a child ignoring SIGTERM was not killed")
	}
	if el := time.Since(start); el > 200*time.Millisecond+reapWait {
		t.Fatalf("Stop took %v", el)
	}
	if !p.Exited() {
		t.Fatal("child still running after Stop")
	}
	// The grandchild shared the process group, so the SIGKILL reached it:
	// it is gone or a zombie waiting for its new parent.
	deadline := time.Now().Add(5 * time.Second)
	for alive(grandchild) {
		if time.Now().After(deadline) {
			t.Fatalf("grandchild %d survived its group's SIGKILL", grandchild)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// alive reports whether pid runs (not gone, not a zombie).
func alive(pid int) bool {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return false
	}
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	return i < 0 || i+2 >= len(s) || s[i+2] != 'Z'
}

func TestEarlyExitFailsTheWait(t *testing.T) {
	g := testGroup(t, "fail")
	if _, err := g.Start("broken"); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	err := g.WaitReady(ctx, "never", func(context.Context) error { return errors.New("not yet") })
	if !errors.Is(err, ErrExited) || !strings.Contains(err.Error(), "broken") || !strings.Contains(err.Error(), "cannot start") {
		t.Fatalf("WaitReady = %v; want ErrExited naming the child and quoting its log", err)
	}
	if got := g.LastErrors(); !strings.HasPrefix(got, "broken: level=ERROR") {
		t.Fatalf("LastErrors = %q", got)
	}
}

func TestWaitReadyTimesOut(t *testing.T) {
	g := &Group{Bin: os.Args[0], LogDir: t.TempDir()}
	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	err := g.WaitReady(ctx, "a closed port answers", HTTPOK(&http.Client{Timeout: time.Second}, "http://"+freeAddr(t)+"/"))
	if !errors.Is(err, ErrNotReady) || !strings.Contains(err.Error(), "a closed port answers") {
		t.Fatalf("WaitReady = %v; want ErrNotReady saying what it waited for", err)
	}
}

func TestCmdStopSignalEnvAndSameGroup(t *testing.T) {
	p, err := Start(Cmd{Name: "hup", Path: os.Args[0], Args: []string{"a", "b"}, Env: []string{childEnv + "=hup"},
		LogDir: t.TempDir(), StopSignal: syscall.SIGHUP, SameGroup: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(p.Kill)
	g := &Group{}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	err = g.WaitReady(ctx, "the child prints its group", func(context.Context) error {
		if !strings.Contains(p.Tail(256), "pgrp") {
			return errors.New("not yet")
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	want := fmt.Sprintf("pgrp %d args a b", syscall.Getpgrp())
	if got := strings.TrimSpace(p.Tail(256)); got != want {
		t.Fatalf("child says %q, want %q (the parent's group, Env and Args applied)", got, want)
	}
	// The child ignores SIGTERM: only the configured stop signal ends it
	// without a kill.
	if killed := p.Stop(10 * time.Second); killed || p.Err() != nil || !strings.Contains(p.Tail(256), "got SIGHUP") {
		t.Fatalf("Stop with SIGHUP: killed %v, err %v, log %q", killed, p.Err(), p.Tail(256))
	}
}

func TestKillEndsAChildIgnoringSIGTERM(t *testing.T) {
	p, err := Start(Cmd{Name: "sleep", Path: os.Args[0], Env: []string{childEnv + "=sleep"}, LogDir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	p.Kill()
	if !p.Exited() {
		t.Fatal("child still running after Kill")
	}
	if err := p.Err(); err == nil || !strings.Contains(err.Error(), "killed") {
		t.Fatalf("exit error %v, want killed", err)
	}
}
