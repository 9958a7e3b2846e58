// Package supervise owns the child processes of the commands and tests
// that run a fleet of rolter processes on one machine (`rolter demo`,
// `rolter bench fleet`, the e2e harness): it starts each child (in its own
// process group unless told otherwise) with its output in a log file,
// waits until an HTTP readiness URL answers, notices children that exit
// early, and stops them with SIGTERM (or another stop signal), then
// SIGKILL to the whole group after a grace period. It is the only code
// that starts and stops rolter's child processes.
//
// A Group is safe for concurrent use. Stopping never blocks longer than
// the grace period plus a reap wait per child.
package supervise

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"time"
)

// DefaultGrace is how long a stopped child gets between SIGTERM and SIGKILL.
const DefaultGrace = 5 * time.Second

// reapWait bounds the wait for a child after it was SIGKILLed (a safety
// net: a killed child is reaped within milliseconds unless the machine
// is stalled).
const reapWait = 10 * time.Second

// ErrExited marks a child that exited while something waited on it.
var ErrExited = errors.New("supervise: child exited")

// ErrNotReady marks a readiness URL that did not answer 200 in time.
var ErrNotReady = errors.New("supervise: not ready")

// Group is a set of children started from one executable, each logging to
// LogDir/<name>.log.
type Group struct {
	// Bin is the executable every child runs; Args come before each
	// child's own (a test binary re-executing itself needs both), Env is
	// added to the parent's environment.
	Bin  string
	Args []string
	Env  []string
	// LogDir holds the children's logs; it is created on the first Start.
	LogDir string

	mu    sync.Mutex
	procs []*Proc
}

// Cmd is one child to start.
type Cmd struct {
	// Name names the child in messages and its log LogDir/<Name>.log.
	Name   string
	Path   string
	Args   []string
	Env    []string // added to the parent's environment
	LogDir string
	// StopSignal is what Stop and StopAll send first (default SIGTERM;
	// nginx's graceful stop is SIGQUIT).
	StopSignal syscall.Signal
	// SameGroup keeps the child in the parent's process group, so a
	// terminal's Ctrl-C reaches it too: an interrupted test run leaves
	// no children behind. Otherwise the child leads its own group, which
	// every stop signal goes to, and the parent stops it in order.
	SameGroup bool
}

// Proc is one child. Done closes once it has exited and been reaped.
type Proc struct {
	Name string
	// Log is the file holding the child's stdout and stderr.
	Log  string
	cmd  *exec.Cmd
	stop syscall.Signal
	pgrp bool // the child leads its own process group
	done chan struct{}
	err  error // valid once done is closed
}

// Start runs c.Path with c.Args, its stdout and stderr in
// c.LogDir/<c.Name>.log (created, with LogDir, as needed).
func Start(c Cmd) (*Proc, error) {
	if err := os.MkdirAll(c.LogDir, 0o700); err != nil {
		return nil, fmt.Errorf("supervise: log dir: %w", err)
	}
	path := filepath.Join(c.LogDir, c.Name+".log")
	out, err := os.OpenFile(path, os.O_CREATE|os.O_WRONLY|os.O_TRUNC, 0o600)
	if err != nil {
		return nil, fmt.Errorf("supervise: %w", err)
	}
	cmd := exec.Command(c.Path, c.Args...)
	cmd.Stdout, cmd.Stderr = out, out
	if len(c.Env) > 0 {
		cmd.Env = append(os.Environ(), c.Env...)
	}
	if !c.SameGroup {
		cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	}
	if err := cmd.Start(); err != nil {
		out.Close()
		return nil, fmt.Errorf("supervise: starting %s: %w", c.Name, err)
	}
	p := &Proc{Name: c.Name, Log: path, cmd: cmd, stop: c.StopSignal, pgrp: !c.SameGroup, done: make(chan struct{})}
	if p.stop == 0 {
		p.stop = syscall.SIGTERM
	}
	go func() {
		p.err = cmd.Wait()
		out.Close()
		close(p.done)
	}()
	return p, nil
}

// Start runs Bin with Args and args as the child name, in its own process
// group (a terminal's Ctrl-C reaches the parent only, which then stops
// the children in order), with stdout and stderr in LogDir/<name>.log.
func (g *Group) Start(name string, args ...string) (*Proc, error) {
	return g.StartCmd(Cmd{Name: name, Path: g.Bin, Args: append(append([]string(nil), g.Args...), args...), Env: g.Env, LogDir: g.LogDir})
}

// StartCmd starts c as one of the group's children (any executable,
// c.LogDir defaulting to the group's).
func (g *Group) StartCmd(c Cmd) (*Proc, error) {
	if c.LogDir == "" {
		c.LogDir = g.LogDir
	}
	p, err := Start(c)
	if err != nil {
		return nil, err
	}
	g.mu.Lock()
	g.procs = append(g.procs, p)
	g.mu.Unlock()
	return p, nil
}

// Done is closed once the child has exited.
func (p *Proc) Done() <-chan struct{} { return p.done }

// Exited reports whether the child has exited.
func (p *Proc) Exited() bool {
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

// Err is the child's exit error (nil for status 0); valid once Exited.
func (p *Proc) Err() error {
	if !p.Exited() {
		return nil
	}
	return p.err
}

// Pid is the child's process id (and its process group's id unless
// started with SameGroup).
func (p *Proc) Pid() int { return p.cmd.Process.Pid }

// Tail returns the last n bytes of the child's log.
func (p *Proc) Tail(n int64) string {
	f, err := os.Open(p.Log)
	if err != nil {
		return ""
	}
	defer f.Close()
	if st, err := f.Stat(); err == nil && st.Size() > n {
		_, _ = f.Seek(st.Size()-n, io.SeekStart)
	}
	b, _ := io.ReadAll(f)
	return string(b)
}

// Stop sends the stop signal (SIGTERM unless Cmd said otherwise) to the
// child's process group, waits up to grace, then SIGKILLs the group. It
// reports whether the kill was needed.
func (p *Proc) Stop(grace time.Duration) (killed bool) {
	p.kill(p.stop)
	return p.awaitOrKill(time.Now().Add(grace))
}

// Signal sends sig to the child alone (not its group), e.g. SIGHUP.
func (p *Proc) Signal(sig os.Signal) error { return p.cmd.Process.Signal(sig) }

// Kill SIGKILLs the child (its whole group when it leads one) and waits
// until it is reaped, at most reapWait.
func (p *Proc) Kill() {
	p.kill(syscall.SIGKILL)
	select {
	case <-p.done:
	case <-time.After(reapWait):
	}
}

// kill sends sig to the child's group, or to the child in the parent's
// group, unless it has exited.
func (p *Proc) kill(sig syscall.Signal) {
	if p.Exited() {
		return
	}
	if p.pgrp {
		_ = syscall.Kill(-p.Pid(), sig)
	} else {
		_ = p.cmd.Process.Signal(sig)
	}
}

func (p *Proc) awaitOrKill(deadline time.Time) bool {
	t := time.NewTimer(time.Until(deadline))
	defer t.Stop()
	select {
	case <-p.done:
		return false
	case <-t.C:
	}
	if p.Exited() {
		return false
	}
	p.Kill()
	return true
}

// Procs returns the children started so far, in start order.
func (g *Group) Procs() []*Proc {
	g.mu.Lock()
	defer g.mu.Unlock()
	return append([]*Proc(nil), g.procs...)
}

// FirstExited returns a child that has exited, or nil.
func (g *Group) FirstExited() *Proc {
	for _, p := range g.Procs() {
		if p.Exited() {
			return p
		}
	}
	return nil
}

// StopAll sends every child's group its stop signal at once, gives them all
// grace together, then SIGKILLs the groups still running. It returns how
// many had to be killed and forgets every child.
func (g *Group) StopAll(grace time.Duration) int {
	g.mu.Lock()
	procs := g.procs
	g.procs = nil
	g.mu.Unlock()
	for _, p := range procs {
		p.kill(p.stop)
	}
	deadline := time.Now().Add(grace)
	killed := 0
	for _, p := range procs {
		if p.awaitOrKill(deadline) {
			killed++
		}
	}
	return killed
}

// LastErrors returns, for every child whose log has one, its last line
// containing "level=ERROR" (slog's text format), one per line as
// "name: line".
func (g *Group) LastErrors() string {
	var b strings.Builder
	for _, p := range g.Procs() {
		lines := strings.Split(strings.TrimSpace(p.Tail(64<<10)), "\n")
		for i := len(lines) - 1; i >= 0; i-- {
			if strings.Contains(lines[i], "level=ERROR") {
				fmt.Fprintf(&b, "%s: %s\n", p.Name, lines[i])
				break
			}
		}
	}
	return b.String()
}

// pollEvery is the readiness poll period.
const pollEvery = 50 * time.Millisecond

// WaitReady polls check until it returns nil, ctx ends, or a child of g
// exits (then the error wraps ErrExited, names the child and quotes the
// end of its log). On ctx's end the error wraps ErrNotReady and the
// check's last error.
func (g *Group) WaitReady(ctx context.Context, what string, check func(context.Context) error) error {
	t := time.NewTicker(pollEvery)
	defer t.Stop()
	for {
		if p := g.FirstExited(); p != nil {
			return fmt.Errorf("%w: %s exited (%v) while waiting until %s; end of %s:\n%s",
				ErrExited, p.Name, p.Err(), what, p.Log, p.Tail(2000))
		}
		err := check(ctx)
		if err == nil {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("%w: waiting until %s: %v", ErrNotReady, what, err)
		case <-t.C:
		}
	}
}

// HTTPOK returns a check that GETs url with client and succeeds on 200.
func HTTPOK(client *http.Client, url string) func(context.Context) error {
	return func(ctx context.Context) error {
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
		if err != nil {
			return err
		}
		resp, err := client.Do(req)
		if err != nil {
			return err
		}
		defer resp.Body.Close()
		_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 1<<20))
		if resp.StatusCode != http.StatusOK {
			return fmt.Errorf("GET %s: %s", url, resp.Status)
		}
		return nil
	}
}
