package overhead

import (
	"context"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"runtime"
	"strings"
	"time"

	"github.com/rolter/rolter/internal/cli"
)

// Options are the settings of `rolter bench overhead`, as its flags give
// them: the Config its plain flags set, and the ones Run converts.
type Options struct {
	Config Config
	// Targets, Strategies and Modes are comma-separated lists; Nginx is
	// auto, off or a path; Pin is on, off or auto; JSON is a file or "-".
	Targets, Strategies, Modes, Nginx, Pin, JSON string
	SkipRouter                                   bool
}

// RegisterFlags adds the command's flags, with their defaults, to fs.
func (o *Options) RegisterFlags(fs *flag.FlagSet) {
	fs.Float64Var(&o.Config.Rate, "rate", 1000, "fixed rate (requests/s) of the latency measurement")
	fs.DurationVar(&o.Config.Duration, "duration", 1500*time.Millisecond, "length of one fixed-rate window")
	fs.IntVar(&o.Config.Windows, "windows", 12, "fixed-rate windows per cell: CPU per request is their mean without the highest and the lowest, latency is over all of them")
	fs.DurationVar(&o.Config.Idle, "idle", 10*time.Second, "read each proxy's CPU for this long with no request in flight, one [health] interval by default (0: skip)")
	fs.StringVar(&o.Config.Engine, "engine", EngineCanned, "canned (the sim's answers replayed, the body read but not decoded) or sim (the instant-mode sim decodes every request)")
	fs.IntVar(&o.Config.Streams, "streams", 0, "open-streams mode: this many clients each keep one streamed request open (replaces the fixed-rate cells)")
	fs.IntVar(&o.Config.StreamTokens, "stream-tokens", 64, "open-streams mode: token events per stream")
	fs.DurationVar(&o.Config.StreamGap, "stream-gap", 50*time.Millisecond, "open-streams mode: the engine's pause between a stream's token events")
	fs.DurationVar(&o.Config.StreamDuration, "stream-duration", 10*time.Second, "open-streams mode: measured length of each run")
	fs.IntVar(&o.Config.StreamRounds, "stream-rounds", 3, "open-streams mode: runs per path, direct and the proxies alternating")
	fs.Float64Var(&o.Config.SearchStart, "search-start", 2848, "first rate of the max-rate step search (it steps up while the rate holds, down while it fails); every path's rates are on one grid from it")
	fs.Float64Var(&o.Config.SearchFactor, "search-factor", 1.5, "each search step multiplies the rate by this")
	fs.Float64Var(&o.Config.SearchMax, "search-max", 20000, "highest rate the search tries")
	fs.DurationVar(&o.Config.SearchDuration, "search-duration", 2*time.Second, "length of each try of the max-rate search (a rate holds when most of up to 3 counted tries hold)")
	fs.IntVar(&o.Config.SearchBisect, "search-bisect", 4, "once a step held below one that failed, bisect between them this many times: the answer is within factor^(1/2^bisect) of where the path stops holding")
	fs.Float64Var(&o.Config.Disturbed, "disturbed", DefaultDisturbed, "a window with more host steal + other tasks' time on the proxy's CPU, or per CPU on the generator's, than this (ms per s) is measured again, and a failed max-rate try so disturbed is not counted (0: never)")
	fs.IntVar(&o.Config.Reruns, "reruns", 4, "at most this many windows measured again per cell")
	fs.DurationVar(&o.Config.P99Limit, "p99-limit", 10*time.Millisecond, "a rate is sustained while p99 stays under this (and < 0.1% errors)")
	fs.StringVar(&o.Targets, "targets", "1,64", "comma-separated target counts (one in-process sim listening on that many ports)")
	fs.StringVar(&o.Strategies, "strategies", "round_robin,precise_cache_aware", "router strategies to measure")
	fs.StringVar(&o.Modes, "modes", "plain,stream", "plain (non-streaming) and/or stream")
	fs.IntVar(&o.Config.PromptWords, "prompt-words", 64, "words in each chat request's user message")
	fs.IntVar(&o.Config.PromptTokens, "prompt-tokens", 0, "send /v1/completions with a prompt of this many token ids instead of a chat")
	fs.IntVar(&o.Config.MaxTokens, "max-tokens", 8, "max_tokens of each request")
	fs.StringVar(&o.Nginx, "nginx", "auto", "nginx binary: auto (PATH, then /usr/sbin/nginx), a path, or off")
	fs.StringVar(&o.Config.RouterBin, "router-bin", "", "rolter binary run as `rolter router` (default: this executable)")
	fs.BoolVar(&o.SkipRouter, "skip-router", false, "do not measure rolter router")
	fs.StringVar(&o.Config.WorkDir, "workdir", "", "directory for generated configs and logs (default: a temporary one)")
	fs.StringVar(&o.Pin, "pin", "auto", "run the proxy on one CPU and the generator and engine on the others: on, off, auto (on when taskset and 2+ CPUs)")
	fs.IntVar(&o.Config.ProxyCPU, "proxy-cpu", 0, "the proxy's CPU when pinning")
	fs.StringVar(&o.JSON, "json", "", "also write the rows as JSON to this file")
}

// Run is `rolter bench overhead`: it resolves the options (this
// executable is the router unless --router-bin or --skip-router), runs
// the measurements with progress on stdout and prints the table there.
// Unusable options are cli.ErrUsage errors.
func (o Options) Run(ctx context.Context, stdout io.Writer) error {
	cfg := o.Config
	var err error
	if cfg.Targets, err = cli.Counts(o.Targets); err != nil {
		return cli.Usagef("--targets: %v", err)
	}
	if cfg.Strategies, err = cli.Strategies(o.Strategies); err != nil {
		return err
	}
	cfg.Modes = strings.Split(o.Modes, ",")
	for _, m := range cfg.Modes {
		if m != "plain" && m != "stream" {
			return cli.Usagef("--modes takes plain and/or stream")
		}
	}
	switch o.Pin {
	case "on":
		cfg.Pin = true
	case "off":
	case "auto":
		_, lookErr := exec.LookPath("taskset")
		cfg.Pin = lookErr == nil && runtime.NumCPU() >= 2
	default:
		return cli.Usagef("--pin takes on, off or auto")
	}
	switch o.Nginx {
	case "off":
	case "auto":
		if p, err := exec.LookPath("nginx"); err == nil {
			cfg.Nginx = p
		} else if _, err := os.Stat("/usr/sbin/nginx"); err == nil {
			cfg.Nginx = "/usr/sbin/nginx"
		}
	default:
		cfg.Nginx = o.Nginx
	}
	if cfg.RouterBin == "" && !o.SkipRouter {
		if cfg.RouterBin, err = os.Executable(); err != nil {
			return fmt.Errorf("bench overhead: locate the rolter binary: %w", err)
		}
	} else if o.SkipRouter {
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
	if cfg.Streams > 0 {
		least := time.Duration(cfg.StreamTokens) * cfg.StreamGap
		fmt.Fprintf(stdout, "open streams: %d closed-loop clients, %d token events %v apart per stream (at least %v each, so at most %.1f streams/s); "+
			"%d rounds of %v per path, direct and proxies in turn; engine %s\n",
			cfg.Streams, cfg.StreamTokens, cfg.StreamGap, least, float64(cfg.Streams)/least.Seconds(), cfg.StreamRounds, cfg.StreamDuration, cfg.Engine)
	} else {
		fmt.Fprintf(stdout, "open-loop constant rate, latency from each request's scheduled send time; fixed rate %.0f/s, %d windows of %v "+
			"(CPU: mean of the windows without the highest and the lowest; a window with steal + other tasks' time on the proxy's CPU over %.0f ms/s measured again, at most %d per cell); "+
			"idle CPU over %v; max rate: steps ×%.2f from %.0f/s (down while it fails) then %d bisections (resolution %.1f %%), %v per try, p99 < %v, the paths tried in turn at each step, "+
			"a rate held when most of up to 3 counted tries hold (a disturbed failure not counted); engine %s\n",
			cfg.Rate, cfg.Windows, cfg.Duration, cfg.Disturbed, cfg.Reruns, cfg.Idle, cfg.SearchFactor, cfg.SearchStart, cfg.SearchBisect,
			100*(resolution(cfg.SearchFactor, cfg.SearchBisect)-1),
			cfg.SearchDuration, cfg.P99Limit, cfg.Engine)
	}
	if cfg.Pin {
		fmt.Fprintf(stdout, "pinned: each proxy on CPU %d, generator and engine on the other CPUs (taskset)\n", cfg.ProxyCPU)
	} else {
		fmt.Fprintln(stdout, "not pinned: proxy, generator and engine share every CPU")
	}
	if cfg.Nginx == "" {
		fmt.Fprintln(stdout, "nginx: not found, column skipped")
	}
	rows, err := Run(ctx, cfg)
	fmt.Fprintln(stdout)
	PrintTable(stdout, rows)
	if o.JSON != "" {
		if jerr := cli.WriteJSON(o.JSON, rows); jerr != nil && err == nil {
			err = jerr
		}
	}
	return err
}
