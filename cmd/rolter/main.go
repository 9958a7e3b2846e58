// Command rolter is the single binary of the rolter mesh: the router, the
// sidecar, the engine simulator, the demo and the benchmarks are its
// subcommands. This package parses flags and wires packages together; it
// holds no logic of its own: the router process is package routerd's, the
// sidecar's is sidecar.Open's.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"runtime"
	"sort"
	"syscall"

	"github.com/rolter/rolter/internal/cli"
)

// Set by the linker (see Makefile).
var (
	version = "dev"
	commit  = "unknown"
)

// command is one subcommand. run receives the arguments after the
// subcommand name and a context cancelled on SIGINT/SIGTERM.
type command struct {
	summary string
	run     func(ctx context.Context, args []string, stdout, stderr io.Writer) error
}

// commands is the explicit subcommand table. A subcommand is listed only
// once it works.
func commands() map[string]command {
	return map[string]command{
		"version": {"print version, commit and Go version", runVersion},
		"bench":   {"benchmarks: 'bench routing' (fleet simulation), 'bench overhead' (proxy cost), 'bench gossip', 'bench fleet' (real processes on loopback)", runBench},
		"router":  {"run the data plane: the OpenAI-compatible API with streaming and retries", runRouter},
		"sim":     {"run a simulated vLLM engine; 'sim replay' replays a trace or synthetic load", runSim},
		"sidecar": {"run beside one engine: follow its KV events and metrics, gossip summaries to the routers", runSidecar},
		"config":  {"'config diff' / 'config apply': compare or sync a rolter.toml with a cluster through its admin API", runConfig},
		"demo":    {"the whole mesh on loopback: 3 routers, 4 simulated engines with sidecars, background traffic", runDemo},
	}
}

// errUsage marks a command-line error: the message is printed and the
// exit code is 2. It is cli.ErrUsage, which the subcommand packages return.
var errUsage = cli.ErrUsage

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := run(ctx, os.Args[1:], os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}

func run(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	cmds := commands()
	if len(args) == 0 {
		usage(stderr, cmds)
		return 2
	}
	if args[0] == "-h" || args[0] == "--help" || args[0] == "help" {
		usage(stdout, cmds) // asked for: stdout, so it pipes into less or grep
		return 0
	}
	c, ok := cmds[args[0]]
	if !ok {
		fmt.Fprintf(stderr, "rolter: unknown command %q\n\n", args[0])
		usage(stderr, cmds)
		return 2
	}
	if err := c.run(ctx, args[1:], stdout, stderr); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return 0
		}
		fmt.Fprintf(stderr, "rolter %s: %v\n", args[0], err)
		if errors.Is(err, errUsage) {
			return 2
		}
		return 1
	}
	return 0
}

func usage(w io.Writer, cmds map[string]command) {
	fmt.Fprintln(w, "usage: rolter <command> [flags]\n\ncommands:")
	names := make([]string, 0, len(cmds))
	for n := range cmds {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, n := range names {
		fmt.Fprintf(w, "  %-10s %s\n", n, cmds[n].summary)
	}
	fmt.Fprintln(w, "\nrun 'rolter <command> -h' for a command's flags")
}

func runVersion(_ context.Context, _ []string, stdout, _ io.Writer) error {
	fmt.Fprintf(stdout, "rolter %s (commit %s, %s %s/%s)\n", version, commit, runtime.Version(), runtime.GOOS, runtime.GOARCH)
	return nil
}

// newFlagSet returns a flag set that reports errors instead of exiting.
func newFlagSet(name string, stderr io.Writer) *flag.FlagSet {
	fs := flag.NewFlagSet("rolter "+name, flag.ContinueOnError)
	fs.SetOutput(stderr)
	return fs
}

// parseFlags parses args into fs and turns a parse failure into errUsage.
// Only -h prints the flags; a bad flag is one line that says how to list
// them, so the mistake is not buried under the whole list.
func parseFlags(fs *flag.FlagSet, args []string) error {
	out := fs.Output()
	fs.SetOutput(io.Discard)
	err := fs.Parse(args)
	fs.SetOutput(out)
	if errors.Is(err, flag.ErrHelp) {
		fs.Usage()
		return err
	}
	if err != nil {
		return cli.Usagef("%w ('%s -h' lists the flags)", err, fs.Name())
	}
	if fs.NArg() > 0 {
		return cli.Usagef("unexpected arguments %v", fs.Args())
	}
	return nil
}
