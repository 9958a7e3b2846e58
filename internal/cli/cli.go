// Package cli owns what rolter's subcommand packages share about their
// command lines: the usage error (a bad flag; the binary prints it and
// exits 2), the comma-separated list flags, and writing a result as JSON
// to the file a --json flag names.
package cli

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"

	"github.com/rolter/rolter/strategies"
)

// ErrUsage marks a command-line error: the flags cannot be used as
// given. The binary prints the message, which starts with "usage: ", and
// exits 2.
var ErrUsage = errors.New("usage")

// Usage marks err as a usage error.
func Usage(err error) error { return fmt.Errorf("%w: %w", ErrUsage, err) }

// Usagef is a usage error formatted as by fmt.Errorf.
func Usagef(format string, args ...any) error { return Usage(fmt.Errorf(format, args...)) }

// Strategies parses a comma-separated list of strategy names; empty is
// every registered strategy. An unknown name is a usage error.
func Strategies(s string) ([]string, error) {
	if s == "" {
		return strategies.Names(), nil
	}
	var out []string
	for _, n := range strings.Split(s, ",") {
		n = strings.TrimSpace(n)
		if !strategies.Known(n) {
			return nil, Usagef("unknown strategy %q (known: %s)", n, strings.Join(strategies.Names(), ", "))
		}
		out = append(out, n)
	}
	return out, nil
}

// Counts parses a comma-separated list of positive integers.
func Counts(s string) ([]int, error) {
	var out []int
	for _, p := range strings.Split(s, ",") {
		v, err := strconv.Atoi(strings.TrimSpace(p))
		if err != nil || v <= 0 {
			return nil, fmt.Errorf("bad count %q", p)
		}
		out = append(out, v)
	}
	return out, nil
}

// Values parses a comma-separated list of positive numbers.
func Values(s string) ([]float64, error) {
	var out []float64
	for _, p := range strings.Split(s, ",") {
		v, err := strconv.ParseFloat(strings.TrimSpace(p), 64)
		if err != nil || v <= 0 {
			return nil, fmt.Errorf("bad value %q", p)
		}
		out = append(out, v)
	}
	return out, nil
}

// WriteJSON writes v, indented, to path (the value of a --json flag).
func WriteJSON(path string, v any) error {
	b, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		return err
	}
	if err := os.WriteFile(path, append(b, '\n'), 0o644); err != nil {
		return fmt.Errorf("--json: %w", err)
	}
	return nil
}
