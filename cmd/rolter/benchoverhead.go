package main

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"text/tabwriter"
	"time"

	"github.com/rolter/rolter/sim"
)

// overheadFlags are the options of `rolter bench overhead`.
type overheadFlags struct {
	rate, stepFactor            float64
	duration, stepDuration, p99 time.Duration
	targets, strategies, modes  string
	maxRate, startRate          float64
	promptWords, maxTokens      int
	nginx, routerBin, workDir   string
	skipRouter                  bool
}

// column is one way of reaching the sims: directly, or through a proxy
// process whose CPU time is measured.
type column struct {
	name string
	// base returns the URL to send request i to.
	base func(i int) string
	pid  func() []int // the proxy's processes (nil: none measured)
	stop func()
}

// cell is one measured (targets, mode, column) combination.
type cell struct {
	targets           int
	mode, path        string
	fixed             loadStats
	maxSustained      float64
	cpuPer1k          float64 // CPU seconds per 1000 requests, -1 when not measured
	addP50, addP99    time.Duration
	addP999           time.Duration
	haveDirectForDiff bool
}

// runBenchOverhead is `rolter bench overhead`.
func runBenchOverhead(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	var f overheadFlags
	fs := newFlagSet("bench overhead", stderr)
	fs.Float64Var(&f.rate, "rate", 2000, "fixed rate (requests/s) of the latency measurement")
	fs.DurationVar(&f.duration, "duration", 3*time.Second, "length of the fixed-rate measurement")
	fs.Float64Var(&f.startRate, "search-start", 500, "first rate of the max-rate step search")
	fs.Float64Var(&f.stepFactor, "search-factor", 1.5, "each search step multiplies the rate by this")
	fs.Float64Var(&f.maxRate, "search-max", 20000, "highest rate the search tries")
	fs.DurationVar(&f.stepDuration, "search-duration", 2*time.Second, "length of each search step")
	fs.DurationVar(&f.p99, "p99-limit", 10*time.Millisecond, "a rate is sustained while p99 stays under this (and < 0.1% errors)")
	fs.StringVar(&f.targets, "targets", "1,64", "comma-separated target counts (one in-process sim listening on that many ports)")
	fs.StringVar(&f.strategies, "strategies", "round_robin,precise_cache_aware", "router strategies to measure")
	fs.StringVar(&f.modes, "modes", "plain,stream", "plain (non-streaming) and/or stream")
	fs.IntVar(&f.promptWords, "prompt-words", 64, "words in each request's user message")
	fs.IntVar(&f.maxTokens, "max-tokens", 8, "max_tokens of each request")
	fs.StringVar(&f.nginx, "nginx", "auto", "nginx binary: auto (look on PATH), a path, or off")
	fs.StringVar(&f.routerBin, "router-bin", "", "rolter binary run as `rolter router` (default: this executable)")
	fs.BoolVar(&f.skipRouter, "skip-router", false, "do not measure rolter router")
	fs.StringVar(&f.workDir, "workdir", "", "directory for generated configs and logs (default: a temporary one)")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	targets, err := intList(f.targets)
	if err != nil {
		return fmt.Errorf("%w: --targets: %v", errUsage, err)
	}
	names, err := strategyList(f.strategies)
	if err != nil {
		return err
	}
	modes := strings.Split(f.modes, ",")
	for _, m := range modes {
		if m != "plain" && m != "stream" {
			return fmt.Errorf("%w: --modes takes plain and/or stream", errUsage)
		}
	}
	if f.rate <= 0 || f.startRate <= 0 || f.stepFactor <= 1 || f.duration <= 0 || f.stepDuration <= 0 {
		return fmt.Errorf("%w: rates and durations must be positive, --search-factor > 1", errUsage)
	}
	dir := f.workDir
	if dir == "" {
		if dir, err = os.MkdirTemp("", "rolter-bench-overhead-"); err != nil {
			return err
		}
		defer os.RemoveAll(dir)
	} else if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	nginxBin := ""
	switch f.nginx {
	case "off":
	case "auto":
		nginxBin, _ = exec.LookPath("nginx")
	default:
		nginxBin = f.nginx
	}
	routerBin := f.routerBin
	if routerBin == "" && !f.skipRouter {
		if routerBin, err = os.Executable(); err != nil {
			return fmt.Errorf("bench overhead: locate the rolter binary: %w", err)
		}
	}
	raiseFileLimit()
	fmt.Fprintf(stdout, "open-loop constant rate, latency from each request's scheduled send time; fixed rate %.0f/s for %v; "+
		"max rate: steps ×%.2f from %.0f/s, %v each, p99 < %v\n", f.rate, f.duration, f.stepFactor, f.startRate, f.stepDuration, f.p99)
	if nginxBin == "" {
		fmt.Fprintln(stdout, "nginx: not found, column skipped")
	}
	var cells []cell
	for _, n := range targets {
		got, err := overheadTargets(ctx, stdout, stderr, f, n, names, modes, nginxBin, routerBin, dir)
		cells = append(cells, got...)
		if err != nil {
			printOverhead(stdout, cells)
			return err
		}
	}
	printOverhead(stdout, cells)
	return nil
}

// overheadTargets measures every column against one sim on n ports.
func overheadTargets(ctx context.Context, stdout, stderr io.Writer, f overheadFlags, n int, names, modes []string,
	nginxBin, routerBin, dir string) ([]cell, error) {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	addrs, err := startSims(ctx, n)
	if err != nil {
		return nil, err
	}
	cols := []func() (column, error){func() (column, error) { return directColumn(addrs), nil }}
	if routerBin != "" {
		for _, s := range names {
			cols = append(cols, func() (column, error) { return routerColumn(ctx, routerBin, dir, s, addrs, stderr) })
		}
	}
	if nginxBin != "" {
		cols = append(cols, func() (column, error) { return nginxColumn(ctx, nginxBin, dir, addrs) })
	}
	var cells []cell
	direct := map[string]loadStats{}
	for _, mk := range cols {
		col, err := mk()
		if err != nil {
			return cells, err
		}
		for _, mode := range modes {
			c := measure(ctx, f, col, n, mode)
			if col.name == "direct" {
				direct[mode] = c.fixed
			} else if d, ok := direct[mode]; ok {
				c.addP50, c.addP99, c.addP999 = c.fixed.p50-d.p50, c.fixed.p99-d.p99, c.fixed.p999-d.p999
				c.haveDirectForDiff = true
			}
			fmt.Fprintf(stdout, "  %d targets %-6s %-28s p50 %v p99 %v max %.0f/s\n", n, mode, col.name,
				c.fixed.p50.Round(time.Microsecond), c.fixed.p99.Round(time.Microsecond), c.maxSustained)
			cells = append(cells, c)
		}
		if col.stop != nil {
			col.stop()
		}
		if err := ctx.Err(); err != nil {
			return cells, err
		}
	}
	return cells, nil
}

// measure runs the fixed-rate measurement and the max-rate search.
func measure(ctx context.Context, f overheadFlags, col column, targets int, mode string) cell {
	c := cell{targets: targets, mode: mode, path: col.name, cpuPer1k: -1}
	client := newBenchClient()
	defer client.CloseIdleConnections()
	body := benchBody(f.promptWords, f.maxTokens, mode == "stream")
	// Warm connections and caches at a modest rate.
	openLoop(ctx, client, col.base, body, min(f.rate, 500), 500*time.Millisecond)
	before := cpuTime(col.pid)
	c.fixed = openLoop(ctx, client, col.base, body, f.rate, f.duration)
	if col.pid != nil {
		if spent := cpuTime(col.pid) - before; c.fixed.sent > 0 {
			c.cpuPer1k = spent.Seconds() * 1000 / float64(c.fixed.sent)
		}
	}
	// A step that fails is run once more before the search stops, so one
	// burst of noise from a neighbour on a shared machine does not end it.
	for rate := f.startRate; rate <= f.maxRate && ctx.Err() == nil; rate *= f.stepFactor {
		ok := false
		for try := 0; try < 2 && !ok; try++ {
			ok = openLoop(ctx, client, col.base, body, rate, f.stepDuration).sustained(f.p99)
		}
		if !ok {
			break
		}
		c.maxSustained = rate
	}
	return c
}

func newBenchClient() *http.Client {
	return &http.Client{
		Timeout: 10 * time.Second,
		Transport: &http.Transport{
			Proxy:               nil,
			DialContext:         (&net.Dialer{Timeout: 2 * time.Second, KeepAlive: 30 * time.Second}).DialContext,
			MaxIdleConns:        8192,
			MaxIdleConnsPerHost: 8192,
			MaxConnsPerHost:     1024, // beyond this requests queue in the client, and that wait counts
			IdleConnTimeout:     60 * time.Second,
			DisableCompression:  true,
		},
	}
}

func benchBody(words, maxTokens int, stream bool) []byte {
	var b strings.Builder
	for i := range words {
		b.WriteString("word")
		b.WriteString(strconv.Itoa(i))
		b.WriteByte(' ')
	}
	return fmt.Appendf(nil, `{"model":%q,"messages":[{"role":"user","content":%q}],"max_tokens":%d,"stream":%t}`,
		benchModel, b.String(), maxTokens, stream)
}

// benchModel is the model name the sims serve and the router's route uses.
const benchModel = "bench-model"

// startSims runs one instant-mode sim engine serving n loopback ports
// until ctx ends.
func startSims(ctx context.Context, n int) ([]string, error) {
	cfg := sim.DefaultConfig()
	cfg.Model = benchModel
	cfg.Engine.Instant = true
	s := sim.New(cfg, slog.New(slog.DiscardHandler), nil, nil)
	go s.Run(ctx)
	h := s.Handler()
	var addrs []string
	for range n {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return nil, fmt.Errorf("bench overhead: sim listen: %w", err)
		}
		hs := &http.Server{Handler: h, ReadHeaderTimeout: 10 * time.Second}
		go func() { _ = hs.Serve(ln) }()
		go func() {
			<-ctx.Done()
			_ = hs.Close()
		}()
		addrs = append(addrs, ln.Addr().String())
	}
	return addrs, nil
}

func directColumn(addrs []string) column {
	return column{name: "direct", base: func(i int) string { return "http://" + addrs[i%len(addrs)] }}
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

// routerColumn starts `rolter router` over the sims with one route using
// strategy, and waits for it to answer.
func routerColumn(ctx context.Context, bin, dir, strategy string, addrs []string, stderr io.Writer) (column, error) {
	var b strings.Builder
	for i, a := range addrs {
		fmt.Fprintf(&b, "[[providers]]\nname = \"sim-%d\"\napi_base = \"http://%s\"\n\n", i, a)
	}
	fmt.Fprintf(&b, "[[routes]]\nmodel = %q\nstrategy = %q\ntargets = [\n", benchModel, strategy)
	for i := range addrs {
		fmt.Fprintf(&b, "  { provider = \"sim-%d\", model = %q },\n", i, benchModel)
	}
	b.WriteString("]\n")
	cfgPath := filepath.Join(dir, fmt.Sprintf("rolter-%s-%d.toml", strategy, len(addrs)))
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
	logf, err := os.Create(filepath.Join(dir, fmt.Sprintf("router-%s-%d.log", strategy, len(addrs))))
	if err != nil {
		return column{}, err
	}
	cmd := exec.CommandContext(ctx, bin, "router", "--standalone", "--config", cfgPath,
		"--http", fmt.Sprintf("127.0.0.1:%d", api), "--admin", fmt.Sprintf("127.0.0.1:%d", admin))
	stop, err := startLogged(cmd, logf, os.Interrupt)
	if err != nil {
		return column{}, fmt.Errorf("bench overhead: start router: %w", err)
	}
	base := fmt.Sprintf("http://127.0.0.1:%d", api)
	if err := waitReady(ctx, base+"/v1/chat/completions", benchBody(4, 1, false)); err != nil {
		stop()
		return column{}, fmt.Errorf("bench overhead: router (%s) not ready, see %s: %w", strategy, logf.Name(), err)
	}
	pid := cmd.Process.Pid
	return column{name: "rolter router " + strategy, base: func(int) string { return base },
		pid: func() []int { return []int{pid} }, stop: stop}, nil
}

// nginxColumn starts nginx as a round-robin reverse proxy over the sims.
func nginxColumn(ctx context.Context, bin, dir string, addrs []string) (column, error) {
	port, err := freePort()
	if err != nil {
		return column{}, err
	}
	ndir := filepath.Join(dir, fmt.Sprintf("nginx-%d", len(addrs)))
	if err := os.MkdirAll(ndir, 0o755); err != nil {
		return column{}, err
	}
	var up strings.Builder
	for _, a := range addrs {
		fmt.Fprintf(&up, "    server %s;\n", a)
	}
	conf := fmt.Sprintf(`worker_processes auto;
daemon off;
pid %[1]s/nginx.pid;
error_log %[1]s/error.log warn;
events { worker_connections 16384; }
http {
  access_log off;
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
`, ndir, up.String(), port)
	confPath := filepath.Join(ndir, "nginx.conf")
	if err := os.WriteFile(confPath, []byte(conf), 0o644); err != nil {
		return column{}, err
	}
	cmd := exec.CommandContext(ctx, bin, "-p", ndir, "-c", confPath)
	logf, err := os.Create(filepath.Join(ndir, "stderr.log"))
	if err != nil {
		return column{}, err
	}
	stop, err := startLogged(cmd, logf, syscall.SIGQUIT)
	if err != nil {
		return column{}, fmt.Errorf("bench overhead: start nginx: %w", err)
	}
	base := fmt.Sprintf("http://127.0.0.1:%d", port)
	if err := waitReady(ctx, base+"/v1/chat/completions", benchBody(4, 1, false)); err != nil {
		stop()
		return column{}, fmt.Errorf("bench overhead: nginx not ready (see %s): %w", ndir, err)
	}
	master := cmd.Process.Pid
	return column{name: "nginx round-robin", base: func(int) string { return base },
		pid: func() []int { return append([]int{master}, childrenOf(master)...) }, stop: stop}, nil
}

// waitReady polls url with body until it answers 200 (bounded to 15 s).
func waitReady(ctx context.Context, url string, body []byte) error {
	client := &http.Client{Timeout: time.Second}
	var last error = errors.New("no answer")
	for i := 0; i < 150; i++ {
		req, err := http.NewRequestWithContext(ctx, http.MethodPost, url, strings.NewReader(string(body)))
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

// clockTick is USER_HZ, the unit of /proc/<pid>/stat CPU times on Linux.
const clockTick = 100

// cpuTime sums user + system CPU time of the processes pids returns.
func cpuTime(pids func() []int) time.Duration {
	if pids == nil {
		return 0
	}
	var total time.Duration
	for _, pid := range pids() {
		st, ok := procStat(pid)
		if !ok || len(st) < 15 {
			continue
		}
		u, _ := strconv.ParseInt(st[13], 10, 64)
		s, _ := strconv.ParseInt(st[14], 10, 64)
		total += time.Duration(u+s) * time.Second / clockTick
	}
	return total
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

func printOverhead(w io.Writer, cells []cell) {
	fmt.Fprintln(w)
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "targets\tmode\tpath\tp50 µs\tp99 µs\tp99.9 µs\t+p50 µs\t+p99 µs\t+p99.9 µs\terrors\tmax rate/s (p99<limit)\tCPU s/1k req\t")
	us := func(d time.Duration) string {
		return strconv.FormatFloat(float64(d)/float64(time.Microsecond), 'f', 0, 64)
	}
	for _, c := range cells {
		add := []string{"-", "-", "-"}
		if c.haveDirectForDiff {
			add = []string{us(c.addP50), us(c.addP99), us(c.addP999)}
		}
		cpu := "-"
		if c.cpuPer1k >= 0 {
			cpu = strconv.FormatFloat(c.cpuPer1k, 'f', 3, 64)
		}
		fmt.Fprintf(tw, "%d\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%d\t%.0f\t%s\t\n", c.targets, c.mode, c.path,
			us(c.fixed.p50), us(c.fixed.p99), us(c.fixed.p999), add[0], add[1], add[2], c.fixed.errors, c.maxSustained, cpu)
	}
	tw.Flush()
}

// loadStats summarises one open-loop run.
type loadStats struct {
	sent, errors   int
	p50, p99, p999 time.Duration
	behind         time.Duration // how late the generator ran at worst
}

// sustained reports whether the run kept p99 under limit with fewer than
// 0.1% errors.
func (s loadStats) sustained(limit time.Duration) bool {
	return s.sent > 0 && s.p99 < limit && s.errors*1000 < s.sent
}

// openLoop sends rate requests per second for dur, each at its scheduled
// time whatever happened to the earlier ones (no coordinated omission),
// and measures each request's latency from its scheduled send time to the
// end of its response body. A failed request counts as an error and as a
// latency of the client timeout.
func openLoop(ctx context.Context, client *http.Client, base func(int) string, body []byte, rate float64, dur time.Duration) loadStats {
	n := max(int(rate*dur.Seconds()), 1)
	interval := time.Duration(float64(time.Second) / rate)
	lat := make([]time.Duration, n)
	failed := make([]bool, n)
	var wg sync.WaitGroup
	start := time.Now()
	var behind time.Duration
	for i := 0; i < n && ctx.Err() == nil; i++ {
		at := start.Add(time.Duration(i) * interval)
		if d := time.Until(at); d > 0 {
			time.Sleep(d)
		} else {
			behind = max(behind, -d)
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			lat[i], failed[i] = send(ctx, client, base(i), body, at)
		}()
	}
	wg.Wait()
	s := loadStats{sent: n, behind: behind}
	for i := range failed {
		if failed[i] {
			s.errors++
			lat[i] = client.Timeout
		}
	}
	slices.Sort(lat)
	q := func(p float64) time.Duration { return lat[min(int(p*float64(n)), n-1)] }
	s.p50, s.p99, s.p999 = q(0.50), q(0.99), q(0.999)
	return s
}

// send posts body and reads the whole response (every SSE event when
// streaming).
func send(ctx context.Context, client *http.Client, base string, body []byte, at time.Time) (time.Duration, bool) {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, base+"/v1/chat/completions", strings.NewReader(string(body)))
	if err != nil {
		return 0, true
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := client.Do(req)
	if err != nil {
		return 0, true
	}
	defer resp.Body.Close()
	r := bufio.NewReader(resp.Body)
	if _, err := io.Copy(io.Discard, r); err != nil {
		return 0, true
	}
	return time.Since(at), resp.StatusCode != http.StatusOK
}

// startLogged starts cmd with its output in logf and returns the function
// that stops it: sig (its graceful shutdown), then SIGKILL after 5 s, then
// logf is closed. On a start error logf is closed already.
func startLogged(cmd *exec.Cmd, logf *os.File, sig os.Signal) (stop func(), err error) {
	cmd.Stdout, cmd.Stderr = logf, logf
	if err := cmd.Start(); err != nil {
		logf.Close()
		return nil, err
	}
	return func() {
		_ = cmd.Process.Signal(sig)
		done := make(chan struct{})
		go func() { _ = cmd.Wait(); close(done) }()
		select {
		case <-done:
		case <-time.After(5 * time.Second):
			_ = cmd.Process.Kill()
			<-done
		}
		logf.Close()
	}, nil
}
