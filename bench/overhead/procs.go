package overhead

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/rolter/rolter/config"
	"github.com/rolter/rolter/supervise"
)

// column is one way of reaching the sim: directly, or through a proxy
// process whose CPU time is measured.
type column struct {
	path, strategy string
	// base returns the URL to send request i to.
	base func(i int) string
	pid  func() []int // the proxy's processes (nil: none measured)
	// metrics is a Go proxy's /metrics URL (its admin port), "" for
	// others: the runtime's own figures (goruntime.go).
	metrics string
	stop    func()
	// hosts is how many addresses base spreads the requests over (0: one).
	hosts int
}

func (c column) name() string { return Row{Path: c.path, Strategy: c.strategy}.name() }

// model is the model name the sim serves and the router's route uses.
const model = "bench-model"

func directColumn(addrs []string) column {
	return column{path: "direct", hosts: len(addrs), base: func(i int) string { return "http://" + addrs[i%len(addrs)] }}
}

// freePort returns a loopback port free at the time of the call.
func freePort() (int, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port, nil
}

// startProxy starts bin with args under the supervisor, on the proxy's
// CPU when pinning (taskset execs bin, so the pid is the proxy's), its
// output in logDir/name.log; stop is its graceful-shutdown signal.
func startProxy(cfg Config, name, logDir string, stop syscall.Signal, bin string, args ...string) (*supervise.Proc, error) {
	c := supervise.Cmd{Name: name, Path: bin, Args: args, LogDir: logDir, StopSignal: stop}
	if cfg.Pin {
		c.Path, c.Args = "taskset", append([]string{"-c", strconv.Itoa(cfg.ProxyCPU), bin}, args...)
	}
	return supervise.Start(c)
}

// routerColumn starts `rolter router` over the sim's ports with one route
// using strategy, and waits for it to answer.
func routerColumn(ctx context.Context, cfg Config, strategy string, addrs []string) (column, error) {
	rc := config.Default()
	route := config.Route{Model: model, Strategy: strategy}
	for i, a := range addrs {
		name := fmt.Sprintf("sim-%d", i)
		rc.Providers = append(rc.Providers, config.Provider{Name: name, APIBase: "http://" + a})
		route.Targets = append(route.Targets, config.Target{Provider: name, Model: model})
	}
	rc.Routes = []config.Route{route}
	var b strings.Builder
	if err := config.Encode(&b, &rc, ""); err != nil {
		return column{}, err
	}
	cfgPath := filepath.Join(cfg.WorkDir, fmt.Sprintf("rolter-%s-%d.toml", strategy, len(addrs)))
	if err := os.WriteFile(cfgPath, []byte(b.String()), 0o644); err != nil {
		return column{}, err
	}
	api, err := freePort()
	if err != nil {
		return column{}, err
	}
	admin, err := freePort()
	if err != nil {
		return column{}, err
	}
	p, err := startProxy(cfg, fmt.Sprintf("router-%s-%d", strategy, len(addrs)), cfg.WorkDir, syscall.SIGINT, cfg.RouterBin,
		"router", "--standalone", "--config", cfgPath,
		"--http", fmt.Sprintf("127.0.0.1:%d", api), "--admin", fmt.Sprintf("127.0.0.1:%d", admin))
	if err != nil {
		return column{}, fmt.Errorf("bench overhead: start router: %w", err)
	}
	stop := func() { p.Stop(stopGrace) }
	base := fmt.Sprintf("http://127.0.0.1:%d", api)
	if err := waitReady(ctx, base, benchRequest(Config{PromptWords: 4, MaxTokens: 1}, false)); err != nil {
		stop()
		return column{}, fmt.Errorf("bench overhead: router (%s) not ready, see %s: %w", strategy, p.Log, err)
	}
	pid := p.Pid()
	return column{path: "rolter router", strategy: strategy, base: func(int) string { return base },
		pid: func() []int { return []int{pid} }, metrics: fmt.Sprintf("http://127.0.0.1:%d/metrics", admin), stop: stop}, nil
}

// nginxColumn starts nginx as a round-robin reverse proxy over the sim's
// ports.
func nginxColumn(ctx context.Context, cfg Config, addrs []string) (column, error) {
	port, err := freePort()
	if err != nil {
		return column{}, err
	}
	ndir := filepath.Join(cfg.WorkDir, fmt.Sprintf("nginx-%d", len(addrs)))
	if err := os.MkdirAll(ndir, 0o755); err != nil {
		return column{}, err
	}
	var up strings.Builder
	for _, a := range addrs {
		fmt.Fprintf(&up, "    server %s;\n", a)
	}
	// One worker when pinned: it has one CPU, as the router has.
	workers := "auto"
	if cfg.Pin {
		workers = "1"
	}
	conf := fmt.Sprintf(`worker_processes %[4]s;
daemon off;
pid %[1]s/nginx.pid;
error_log %[1]s/error.log warn;
events { worker_connections 16384; }
http {
  access_log off;
  client_max_body_size 64m;
  client_body_buffer_size 1m;
  client_body_temp_path %[1]s/body;
  proxy_temp_path %[1]s/proxy;
  fastcgi_temp_path %[1]s/fastcgi;
  uwsgi_temp_path %[1]s/uwsgi;
  scgi_temp_path %[1]s/scgi;
  upstream sims {
%[2]s    keepalive 1024;
  }
  server {
    listen 127.0.0.1:%[3]d;
    location / {
      proxy_pass http://sims;
      proxy_http_version 1.1;
      proxy_set_header Connection "";
      proxy_buffering off;
    }
  }
}
`, ndir, up.String(), port, workers)
	confPath := filepath.Join(ndir, "nginx.conf")
	if err := os.WriteFile(confPath, []byte(conf), 0o644); err != nil {
		return column{}, err
	}
	p, err := startProxy(cfg, "stderr", ndir, syscall.SIGQUIT, cfg.Nginx, "-p", ndir, "-c", confPath)
	if err != nil {
		return column{}, fmt.Errorf("bench overhead: start nginx: %w", err)
	}
	stop := func() { p.Stop(stopGrace) }
	base := fmt.Sprintf("http://127.0.0.1:%d", port)
	if err := waitReady(ctx, base, benchRequest(Config{PromptWords: 4, MaxTokens: 1}, false)); err != nil {
		stop()
		return column{}, fmt.Errorf("bench overhead: nginx not ready (see %s): %w", ndir, err)
	}
	master := p.Pid()
	return column{path: "nginx", strategy: "round_robin", base: func(int) string { return base },
		pid: func() []int { return append([]int{master}, childrenOf(master)...) }, stop: stop}, nil
}

// waitReady polls base with rq until it answers 200 (bounded to 15 s).
func waitReady(ctx context.Context, base string, rq request) error {
	client := &http.Client{Timeout: time.Second}
	var last error = errors.New("no answer")
	for range 150 {
		req, err := http.NewRequestWithContext(ctx, http.MethodPost, base+rq.path, strings.NewReader(string(rq.body)))
		if err != nil {
			return err
		}
		req.Header.Set("Content-Type", "application/json")
		resp, err := client.Do(req)
		if err == nil {
			_, _ = io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return nil
			}
			last = fmt.Errorf("status %d", resp.StatusCode)
		} else {
			last = err
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(100 * time.Millisecond):
		}
	}
	return last
}

// raiseFileLimit lifts the soft open-files limit to the hard one: an
// open-loop generator at thousands of requests per second holds many
// connections, and so do the proxies it starts (they inherit the limit).
func raiseFileLimit() {
	var l syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &l); err == nil && l.Cur < l.Max {
		l.Cur = l.Max
		_ = syscall.Setrlimit(syscall.RLIMIT_NOFILE, &l)
	}
}

// pinSelf moves every thread of this process (the generator and the
// engine) off CPU proxy, and returns the function that gives it its CPUs
// back. Threads the runtime starts later inherit the mask.
func pinSelf(proxy int) (restore func(), err error) {
	if _, err := exec.LookPath("taskset"); err != nil {
		return nil, fmt.Errorf("%w: pinning needs taskset: %v", ErrConfig, err)
	}
	cpus, err := allowedCPUs()
	if err != nil {
		return nil, err
	}
	var rest []string
	found := false
	for _, c := range cpus {
		if c == proxy {
			found = true
		} else {
			rest = append(rest, strconv.Itoa(c))
		}
	}
	if !found || len(rest) == 0 {
		return nil, fmt.Errorf("%w: pinning needs CPU %d and another one; this process may use %v", ErrConfig, proxy, cpus)
	}
	all := make([]string, len(cpus))
	for i, c := range cpus {
		all[i] = strconv.Itoa(c)
	}
	set := func(list []string) error {
		out, err := exec.Command("taskset", "-a", "-p", "-c", strings.Join(list, ","), strconv.Itoa(os.Getpid())).CombinedOutput()
		if err != nil {
			return fmt.Errorf("bench overhead: taskset: %v: %s", err, out)
		}
		return nil
	}
	if err := set(rest); err != nil {
		return nil, err
	}
	// As many Ps as CPUs left: with more, the runtime's Ps take turns on
	// too few CPUs and wake-ups (timers, the netpoller) wait for a turn.
	procs := runtime.GOMAXPROCS(len(rest))
	return func() {
		_ = set(all)
		runtime.GOMAXPROCS(procs)
	}, nil
}

// allowedCPUs reads this process's CPU list from /proc/self/status.
func allowedCPUs() ([]int, error) {
	b, err := os.ReadFile("/proc/self/status")
	if err != nil {
		return nil, err
	}
	for line := range strings.SplitSeq(string(b), "\n") {
		list, ok := strings.CutPrefix(line, "Cpus_allowed_list:")
		if !ok {
			continue
		}
		var cpus []int
		for r := range strings.SplitSeq(strings.TrimSpace(list), ",") {
			lo, hi, isRange := strings.Cut(r, "-")
			a, err1 := strconv.Atoi(lo)
			b := a
			var err2 error
			if isRange {
				b, err2 = strconv.Atoi(hi)
			}
			if err1 != nil || err2 != nil {
				return nil, fmt.Errorf("bench overhead: unreadable CPU list %q", list)
			}
			for c := a; c <= b; c++ {
				cpus = append(cpus, c)
			}
		}
		return cpus, nil
	}
	return nil, errors.New("bench overhead: no Cpus_allowed_list in /proc/self/status")
}

// procStat returns the fields of /proc/<pid>/stat (field 1 is index 0;
// the command name, which may hold spaces, is one field).
func procStat(pid int) ([]string, bool) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return nil, false
	}
	s := string(b)
	open, end := strings.IndexByte(s, '('), strings.LastIndexByte(s, ')')
	if open < 0 || end < open {
		return nil, false
	}
	rest := strings.Fields(s[end+1:])
	return append([]string{strings.TrimSpace(s[:open]), s[open+1 : end]}, rest...), true
}

// childrenOf lists the processes whose parent is pid.
func childrenOf(pid int) []int {
	ents, err := os.ReadDir("/proc")
	if err != nil {
		return nil
	}
	var out []int
	for _, e := range ents {
		p, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		if st, ok := procStat(p); ok && len(st) > 3 && st[3] == strconv.Itoa(pid) {
			out = append(out, p)
		}
	}
	return out
}

// stopGrace is how long a stopped proxy gets between its graceful
// signal and SIGKILL.
const stopGrace = 5 * time.Second
