package mesh

import (
	"errors"
	"fmt"
	"sync"

	"github.com/hashicorp/memberlist"
)

// ErrNameConflict: another member of the pool already uses this node's
// name. Memberlist ignores the newcomer, so without this the engine behind
// it would simply never appear (or stay STALE) in the routers' views.
var ErrNameConflict = errors.New("mesh: node name already in use in the gossip pool")

// nameConflicts records the name conflicts memberlist reports; the first
// one is the node's Conflict error, each distinct address pair is logged
// once.
type nameConflicts struct {
	mu    sync.Mutex
	first error
	seen  map[[2]string]bool
}

// conflictDelegate is the memberlist.ConflictDelegate view of a Node: it
// runs on memberlist's goroutines and does not block.
type conflictDelegate core

// NotifyConflict implements memberlist.ConflictDelegate: existing is the
// member this node knows under the name (this node itself when the
// newcomer took its name), other the one that claims it.
func (d *conflictDelegate) NotifyConflict(existing, other *memberlist.Node) {
	n := (*core)(d)
	n.stats.NameConflicts.Add(1)
	err := fmt.Errorf("%w: node id %q is claimed by %s and by %s; give every router and sidecar its own "+
		"--node-id (or ROLTER_NODE_ID)", ErrNameConflict, existing.Name, existing.Address(), other.Address())
	c := &n.conflicts
	c.mu.Lock()
	if c.first == nil {
		c.first = err
	}
	if c.seen == nil {
		c.seen = map[[2]string]bool{}
	}
	key := [2]string{existing.Address(), other.Address()}
	logIt := !c.seen[key] && len(c.seen) < 64
	c.seen[key] = true
	c.mu.Unlock()
	if logIt {
		n.log.Error("gossip node id conflict: the second process is ignored by the pool", "node_id", existing.Name,
			"known_at", existing.Address(), "claimed_by", other.Address(), "fix", "set a distinct --node-id on one of them")
	}
}

// Conflict returns the first name conflict seen since the node started,
// or nil. Starting returns it when joining the seeds revealed one.
func (n *core) Conflict() error {
	n.conflicts.mu.Lock()
	defer n.conflicts.mu.Unlock()
	return n.conflicts.first
}
