package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"

	"github.com/rolter/rolter/demo"
	"github.com/rolter/rolter/internal/cli"
	"github.com/rolter/rolter/localfleet"
)

// runDemo is `rolter demo` (package demo): the whole mesh on loopback,
// ready to try, until SIGINT/SIGTERM (ctx).
func runDemo(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	var o demo.Options
	fs := newFlagSet("demo", stderr)
	o.RegisterFlags(fs)
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	var err error
	if o.Bin, err = os.Executable(); err != nil {
		return fmt.Errorf("finding the rolter binary: %w", err)
	}
	err = demo.Run(ctx, o, stdout, stderr)
	if errors.Is(err, demo.ErrOptions) || errors.Is(err, localfleet.ErrPortRange) {
		return cli.Usage(err)
	}
	return err
}
