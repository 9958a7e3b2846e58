package routerd

import (
	"errors"
	"log/slog"
	"os"
	"path/filepath"
	"strings"

	"github.com/rolter/rolter/cluster/mesh"
)

// Node ids. A router and a sidecar started on one host with no --node-id
// used to both take the hostname; the gossip pool then ignored the second
// and its engine stayed STALE. The defaults now carry the role and the
// port, so they never collide on one host:
//
//	router:  <hostname>-router-<--raft port>
//	sidecar: <hostname>-sidecar-<--gossip port>
//
// --node-id, then $ROLTER_NODE_ID, still win. A router remembers a
// defaulted id in <data-dir>/node-id, so it keeps it when its ports or the
// defaults change; a data dir made before this rule (a Raft log but no
// node-id file) keeps the hostname it was made under.

// nodeIDFile holds a defaulted router id inside its data dir.
const nodeIDFile = "node-id"

// routerNodeID resolves a router's id and its data dir: --node-id, else
// $ROLTER_NODE_ID, else the id remembered in the data dir, else the
// hostname for a data dir made under the old default, else the default.
// remember is true when the id was defaulted and should be written to the
// data dir.
func routerNodeID(flagID, dataDir, raftAddr string, getenv func(string) string, log *slog.Logger) (id, dir string, remember bool, err error) {
	withDir := func(id string) string {
		if dataDir != "" {
			return dataDir
		}
		return filepath.Join("rolter-data", id)
	}
	for _, id := range []string{flagID, strings.TrimSpace(getenv("ROLTER_NODE_ID"))} {
		if id != "" {
			return id, withDir(id), false, nil
		}
	}
	host, _ := os.Hostname()
	candidates := []string{dataDir}
	if dataDir == "" && host != "" {
		candidates = []string{filepath.Join("rolter-data", host)}
	}
	def, derr := mesh.DefaultNodeID("router", raftAddr)
	if derr == nil && dataDir == "" {
		candidates = append([]string{withDir(def)}, candidates...)
	}
	for _, d := range candidates {
		if d == "" {
			continue
		}
		if b, err := os.ReadFile(filepath.Join(d, nodeIDFile)); err == nil {
			if id := strings.TrimSpace(string(b)); id != "" {
				return id, d, false, nil
			}
		}
		if _, err := os.Stat(filepath.Join(d, "raft.db")); err == nil && host != "" {
			log.Warn("keeping the hostname as node id: this data dir was created under the old default; "+
				"pass --node-id to make it explicit", "node_id", host, "data_dir", d)
			return host, d, true, nil
		}
	}
	if derr != nil {
		return "", "", false, derr
	}
	return def, withDir(def), true, nil
}

// rememberNodeID writes id to dir/node-id unless it is there already.
func rememberNodeID(dir, id string) error {
	path := filepath.Join(dir, nodeIDFile)
	if _, err := os.Stat(path); err == nil {
		return nil
	} else if !errors.Is(err, os.ErrNotExist) {
		return err
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return err
	}
	return os.WriteFile(path, []byte(id+"\n"), 0o600)
}

// standaloneNodeID names a standalone router in x-rolter-node-id and its
// spans: --node-id, then $ROLTER_NODE_ID, then <hostname>-router-<--http
// port> ("" when none can be made: the header is then left out).
func standaloneNodeID(flagID, httpAddr string, getenv func(string) string) string {
	if flagID != "" {
		return flagID
	}
	if id := getenv("ROLTER_NODE_ID"); id != "" {
		return id
	}
	id, _ := mesh.DefaultNodeID("router", httpAddr)
	return id
}
