package main

import (
	"fmt"
	"io"
	"log/slog"
)

// newLogger is the process logger for --log-format: "text" (logfmt-like
// key=value) or "json" (one object a line, what log shippers parse).
func newLogger(format string, w io.Writer) (*slog.Logger, error) {
	switch format {
	case "text", "":
		return slog.New(slog.NewTextHandler(w, nil)), nil
	case "json":
		return slog.New(slog.NewJSONHandler(w, nil)), nil
	}
	return nil, fmt.Errorf("%w: --log-format must be text or json, not %q", errUsage, format)
}
