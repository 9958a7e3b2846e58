package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"strings"
	"time"

	"github.com/rolter/rolter/adminapi"
	"github.com/rolter/rolter/cluster"
	"github.com/rolter/rolter/routerd"
)

// runConfig is `rolter config diff|apply`: the GitOps pair. Both post
// --config to a router's admin API; diff prints what syncing it would
// change, apply syncs it and prints the new config_version.
func runConfig(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	if len(args) == 0 || (args[0] != "diff" && args[0] != "apply") {
		fmt.Fprintln(stderr, "usage: rolter config diff|apply --admin URL --token-file FILE --config rolter.toml")
		return fmt.Errorf("%w: want 'config diff' or 'config apply'", errUsage)
	}
	verb := args[0]
	fs := newFlagSet("config "+verb, stderr)
	admin := fs.String("admin", "http://127.0.0.1:4001", "admin address of any router (host:port or http(s)://host:port)")
	tokenFile := fs.String("token-file", "", "file holding an admin token (default $ROLTER_ADMIN_TOKEN)")
	path := fs.String("config", "rolter.toml", "the rolter.toml to diff or apply")
	timeout := fs.Duration("timeout", 30*time.Second, "bound on the whole request")
	if err := parseFlags(fs, args[1:]); err != nil {
		return err
	}
	token, err := routerd.ReadToken(*tokenFile, "ROLTER_ADMIN_TOKEN", os.Getenv)
	if err != nil {
		return fmt.Errorf("%w: %w", errUsage, err)
	}
	if token == "" {
		return fmt.Errorf("%w: no admin token: pass --token-file or set ROLTER_ADMIN_TOKEN", errUsage)
	}
	file, err := os.ReadFile(*path)
	if err != nil {
		return fmt.Errorf("--config: %w", err)
	}
	base := *admin
	if !strings.HasPrefix(base, "http://") && !strings.HasPrefix(base, "https://") {
		base = "http://" + base
	}
	ctx, cancel := context.WithTimeout(ctx, *timeout)
	defer cancel()
	c := &adminapi.Client{Admin: base, Token: token, HTTP: &http.Client{}}
	var rep adminapi.ConfigReport
	if verb == "diff" {
		rep, err = c.Diff(ctx, file)
	} else {
		rep, err = c.Apply(ctx, file)
	}
	if err != nil {
		return err
	}
	if err := rep.WriteText(stdout); err != nil {
		return err
	}
	if rep.Outcome == cluster.FileRefused {
		return errRefused // diff of a file apply would refuse: fail the pipeline early
	}
	return nil
}

// errRefused is diff's answer for a file the cluster would refuse (the
// reason is printed above it).
var errRefused = errors.New("the cluster would refuse this file")
