package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"runtime"
	"strings"
	"time"

	"github.com/rolter/rolter/bench/overhead"
)

// runBenchOverhead is `rolter bench overhead` (package bench/overhead).
func runBenchOverhead(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	var cfg overhead.Config
	var targets, strats, modes, nginx, pin, jsonPath string
	var skipRouter bool
	fs := newFlagSet("bench overhead", stderr)
	fs.Float64Var(&cfg.Rate, "rate", 1000, "fixed rate (requests/s) of the latency measurement")
	fs.DurationVar(&cfg.Duration, "duration", 3*time.Second, "length of the fixed-rate measurement")
	fs.Float64Var(&cfg.SearchStart, "search-start", 250, "first rate of the max-rate step search")
	fs.Float64Var(&cfg.SearchFactor, "search-factor", 1.5, "each search step multiplies the rate by this")
	fs.Float64Var(&cfg.SearchMax, "search-max", 20000, "highest rate the search tries")
	fs.DurationVar(&cfg.SearchDuration, "search-duration", 2*time.Second, "length of each search step")
	fs.DurationVar(&cfg.P99Limit, "p99-limit", 10*time.Millisecond, "a rate is sustained while p99 stays under this (and < 0.1% errors)")
	fs.StringVar(&targets, "targets", "1,64", "comma-separated target counts (one in-process sim listening on that many ports)")
	fs.StringVar(&strats, "strategies", "round_robin,precise_cache_aware", "router strategies to measure")
	fs.StringVar(&modes, "modes", "plain,stream", "plain (non-streaming) and/or stream")
	fs.IntVar(&cfg.PromptWords, "prompt-words", 64, "words in each chat request's user message")
	fs.IntVar(&cfg.PromptTokens, "prompt-tokens", 0, "send /v1/completions with a prompt of this many token ids instead of a chat")
	fs.IntVar(&cfg.MaxTokens, "max-tokens", 8, "max_tokens of each request")
	fs.StringVar(&nginx, "nginx", "auto", "nginx binary: auto (PATH, then /usr/sbin/nginx), a path, or off")
	fs.StringVar(&cfg.RouterBin, "router-bin", "", "rolter binary run as `rolter router` (default: this executable)")
	fs.BoolVar(&skipRouter, "skip-router", false, "do not measure rolter router")
	fs.StringVar(&cfg.WorkDir, "workdir", "", "directory for generated configs and logs (default: a temporary one)")
	fs.StringVar(&pin, "pin", "auto", "run the proxy on one CPU and the generator and engine on the others: on, off, auto (on when taskset and 2+ CPUs)")
	fs.IntVar(&cfg.ProxyCPU, "proxy-cpu", 0, "the proxy's CPU when pinning")
	fs.StringVar(&jsonPath, "json", "", "also write the rows as JSON to this file (- for stdout)")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	var err error
	if cfg.Targets, err = intList(targets); err != nil {
		return fmt.Errorf("%w: --targets: %v", errUsage, err)
	}
	if cfg.Strategies, err = strategyList(strats); err != nil {
		return err
	}
	cfg.Modes = strings.Split(modes, ",")
	for _, m := range cfg.Modes {
		if m != "plain" && m != "stream" {
			return fmt.Errorf("%w: --modes takes plain and/or stream", errUsage)
		}
	}
	switch pin {
	case "on":
		cfg.Pin = true
	case "off":
	case "auto":
		_, lookErr := exec.LookPath("taskset")
		cfg.Pin = lookErr == nil && runtime.NumCPU() >= 2
	default:
		return fmt.Errorf("%w: --pin takes on, off or auto", errUsage)
	}
	switch nginx {
	case "off":
	case "auto":
		if p, err := exec.LookPath("nginx"); err == nil {
			cfg.Nginx = p
		} else if _, err := os.Stat("/usr/sbin/nginx"); err == nil {
			cfg.Nginx = "/usr/sbin/nginx"
		}
	default:
		cfg.Nginx = nginx
	}
	if cfg.RouterBin == "" && !skipRouter {
		if cfg.RouterBin, err = os.Executable(); err != nil {
			return fmt.Errorf("bench overhead: locate the rolter binary: %w", err)
		}
	} else if skipRouter {
		cfg.RouterBin = ""
	}
	if cfg.WorkDir == "" {
		if cfg.WorkDir, err = os.MkdirTemp("", "rolter-bench-overhead-"); err != nil {
			return err
		}
		defer os.RemoveAll(cfg.WorkDir)
	} else if err := os.MkdirAll(cfg.WorkDir, 0o755); err != nil {
		return err
	}
	cfg.Log = stdout
	fmt.Fprintf(stdout, "open-loop constant rate, latency from each request's scheduled send time; fixed rate %.0f/s for %v; "+
		"max rate: steps ×%.2f from %.0f/s, %v each, p99 < %v\n", cfg.Rate, cfg.Duration, cfg.SearchFactor, cfg.SearchStart, cfg.SearchDuration, cfg.P99Limit)
	if cfg.Pin {
		fmt.Fprintf(stdout, "pinned: each proxy on CPU %d, generator and engine on the other CPUs (taskset)\n", cfg.ProxyCPU)
	} else {
		fmt.Fprintln(stdout, "not pinned: proxy, generator and engine share every CPU")
	}
	if cfg.Nginx == "" {
		fmt.Fprintln(stdout, "nginx: not found, column skipped")
	}
	rows, err := overhead.Run(ctx, cfg)
	fmt.Fprintln(stdout)
	overhead.PrintTable(stdout, rows)
	if jsonPath != "" {
		if jerr := overhead.WriteJSON(jsonPath, stdout, rows); jerr != nil && err == nil {
			err = jerr
		}
	}
	return err
}
