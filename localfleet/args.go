package localfleet

import (
	"bytes"
	crand "crypto/rand"
	"encoding/hex"
	"net/http"
	"os"
	"path/filepath"
	"runtime/debug"
	"strconv"
	"strings"
	"time"

	"github.com/rolter/rolter/config"
	"github.com/rolter/rolter/sim"
)

// Files are what every router of the fleet reads, all in Dir.
type Files struct {
	Dir           string
	Config        string // rolter.toml
	AdminToken    string // the bootstrap superadmin token's file
	InternalToken string // the routers' shared internal token's file
}

// WriteFiles writes cfg as dir/rolter.toml (header as its leading
// comment), adminToken as dir/admin-token and a fresh internal token as
// dir/internal-token, each readable by the owner only.
func WriteFiles(dir string, cfg *config.Config, header, adminToken string) (Files, error) {
	f := Files{Dir: dir, Config: filepath.Join(dir, "rolter.toml"), AdminToken: filepath.Join(dir, "admin-token"),
		InternalToken: filepath.Join(dir, "internal-token")}
	var toml bytes.Buffer
	if err := config.Encode(&toml, cfg, header); err != nil {
		return f, err
	}
	for path, content := range map[string][]byte{f.Config: toml.Bytes(), f.AdminToken: []byte(adminToken), f.InternalToken: []byte(Token())} {
		if err := os.WriteFile(path, content, 0o600); err != nil {
			return f, err
		}
	}
	return f, nil
}

// Token is a fresh random token (48 hex digits).
func Token() string {
	var b [24]byte
	_, _ = crand.Read(b[:])
	return hex.EncodeToString(b[:])
}

// Seeds are the routers' gossip addresses, which sidecars join.
func (p Plan) Seeds() []string {
	var out []string
	for _, r := range p.Routers {
		out = append(out, Addr(r.Gossip))
	}
	return out
}

// RouterArgs is router i's command line: a Raft cluster of every router
// of the plan (static --join, --bootstrap-expect), the gossip mesh joined
// through the other routers, its data in Dir/data/<id>, --insecure-dev on
// loopback.
func (p Plan) RouterArgs(i int, f Files) []string {
	r := p.Routers[i]
	var join []string
	for _, o := range p.Routers {
		join = append(join, o.ID+"="+Addr(o.Raft))
	}
	for k, o := range p.Routers {
		if k != i {
			join = append(join, Addr(o.Gossip))
		}
	}
	return []string{"router", "--config", f.Config, "--node-id", r.ID,
		"--http", Addr(r.API), "--admin", Addr(r.Admin), "--raft", Addr(r.Raft), "--gossip", Addr(r.Gossip),
		"--join", strings.Join(join, ","), "--bootstrap-expect", strconv.Itoa(len(p.Routers)),
		"--data-dir", filepath.Join(f.Dir, "data", r.ID), "--insecure-dev",
		// Above the 500ms default: a loaded 2-core machine must not see
		// the leader step down whenever a compile starts or a replay peaks.
		"--raft-timeout", "1s",
		"--admin-token-file", f.AdminToken, "--internal-token-file", f.InternalToken}
}

// SimArgs is engine j's `rolter sim` at speed, seeded j+1, publishing KV
// events on its plan ports when kvEvents, with extra flags appended.
func (p Plan) SimArgs(j int, speed float64, kvEvents bool, extra ...string) []string {
	e := p.Engines[j]
	args := []string{"sim", "--http", Addr(e.HTTP), "--speed", strconv.FormatFloat(speed, 'g', -1, 64), "--seed", strconv.Itoa(j + 1)}
	if kvEvents {
		args = append(args, "--kv-events", "tcp://"+Addr(e.KV), "--kv-events-dial", "bind", "--kv-events-replay", "tcp://"+Addr(e.Replay))
	}
	return append(args, extra...)
}

// SidecarArgs is engine j's `rolter sidecar`: it announces the sim's
// model, joins the routers' gossip, serves its metrics on the plan port
// and follows the engine's KV events when kvEvents; extra is appended.
func (p Plan) SidecarArgs(j int, kvEvents bool, extra ...string) []string {
	e := p.Engines[j]
	args := []string{"sidecar", "--engine", e.URL(), "--node-id", e.ID, "--models", sim.DefaultModelName,
		"--gossip", Addr(e.Gossip), "--join", strings.Join(p.Seeds(), ","), "--insecure-dev",
		"--metrics-addr", Addr(e.SideMetrics)}
	if kvEvents {
		args = append(args, "--kv-events", "tcp://"+Addr(e.KV), "--kv-events-replay", "tcp://"+Addr(e.Replay))
	}
	return append(args, extra...)
}

// CgoBuild reports whether the running binary was built with cgo, which
// the sims' and sidecars' ZMQ KV-event sockets need.
func CgoBuild() bool {
	bi, ok := debug.ReadBuildInfo()
	if !ok {
		return false
	}
	for _, s := range bi.Settings {
		if s.Key == "CGO_ENABLED" {
			return s.Value == "1"
		}
	}
	return false
}

// ReplayClient is an HTTP client for replaying load through the fleet:
// it keeps up to 1024 idle connections per host, so an open-loop replay
// does not open a connection per request.
func ReplayClient(timeout time.Duration) *http.Client {
	t := http.DefaultTransport.(*http.Transport).Clone()
	t.MaxIdleConnsPerHost = 1024
	return &http.Client{Timeout: timeout, Transport: t}
}
