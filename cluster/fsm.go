package cluster

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"sync"
	"sync/atomic"

	"github.com/hashicorp/raft"
	"github.com/rolter/rolter/cluster/raftstore"
	"google.golang.org/protobuf/proto"
)

// fsm is the raft.FSM over State. raft calls Apply, Snapshot and Restore
// from its single FSM goroutine, never concurrently with each other;
// Persist runs on another goroutine while later Applies proceed, which is
// safe because a State is never modified once published.
type fsm struct {
	state atomic.Pointer[State]
	log   *slog.Logger

	mu       sync.Mutex
	watchers []chan struct{}
	// applied is the index of the last log entry Apply handled; advanced
	// closes and replaces to wake waitApplied.
	applied  uint64
	advanced chan struct{}
}

var _ raft.FSM = (*fsm)(nil)

func newFSM(log *slog.Logger) *fsm {
	f := &fsm{log: log, advanced: make(chan struct{})}
	f.state.Store(emptyState())
	return f
}

// Apply decodes one log entry and applies it. It returns the command's
// *raftstore.Result (read by whoever proposed the entry).
func (f *fsm) Apply(l *raft.Log) any {
	defer f.advance(l.Index)
	var cmd raftstore.Command
	if err := proto.Unmarshal(l.Data, &cmd); err != nil {
		// A corrupt entry must not stop the log; every replica skips it
		// the same way.
		f.log.Error("raft: undecodable command skipped", "index", l.Index, "err", err)
		return fail(raftstore.Code_CODE_INVALID, "undecodable command: %v", err)
	}
	old := f.state.Load()
	next, res := applyCommand(old, &cmd, l.Index)
	if next != old {
		f.publish(old, next)
	}
	return res
}

// publish makes next the current state and wakes watchers when the
// config_version moved.
func (f *fsm) publish(old, next *State) {
	f.state.Store(next)
	if old.ConfigVersion == next.ConfigVersion {
		return
	}
	f.mu.Lock()
	for _, w := range f.watchers {
		select {
		case w <- struct{}{}:
		default: // a wake-up is already pending; the watcher reads State().
		}
	}
	f.mu.Unlock()
}

func (f *fsm) advance(index uint64) {
	f.mu.Lock()
	if index > f.applied {
		f.applied = index
		close(f.advanced)
		f.advanced = make(chan struct{})
	}
	f.mu.Unlock()
}

// waitApplied blocks until the entry at index has been applied here (the
// read-your-writes step after a forwarded write) or ctx ends.
func (f *fsm) waitApplied(ctx context.Context, index uint64) error {
	for {
		f.mu.Lock()
		done, ch := f.applied >= index, f.advanced
		f.mu.Unlock()
		if done {
			return nil
		}
		select {
		case <-ch:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

func (f *fsm) watch() <-chan struct{} {
	ch := make(chan struct{}, 1)
	f.mu.Lock()
	f.watchers = append(f.watchers, ch)
	f.mu.Unlock()
	return ch
}

// Snapshot is O(1): the current state is immutable, so the snapshot is
// just a reference to it.
func (f *fsm) Snapshot() (raft.FSMSnapshot, error) {
	return &fsmSnapshot{state: f.state.Load()}, nil
}

// Restore replaces the state with a persisted snapshot.
func (f *fsm) Restore(rc io.ReadCloser) error {
	defer rc.Close()
	b, err := io.ReadAll(rc)
	if err != nil {
		return fmt.Errorf("cluster: reading snapshot: %w", err)
	}
	var sn raftstore.Snapshot
	if err := proto.Unmarshal(b, &sn); err != nil {
		return fmt.Errorf("cluster: decoding snapshot: %w", err)
	}
	f.publish(f.state.Load(), stateFromSnapshot(&sn))
	return nil
}

type fsmSnapshot struct{ state *State }

// Persist encodes the state and writes it to sink; on any error the sink
// is cancelled so raft discards the partial snapshot.
func (s *fsmSnapshot) Persist(sink raft.SnapshotSink) error {
	b, err := proto.Marshal(s.state.toSnapshot())
	if err == nil {
		_, err = sink.Write(b)
	}
	if err != nil {
		_ = sink.Cancel()
		return fmt.Errorf("cluster: persisting snapshot: %w", err)
	}
	return sink.Close()
}

func (s *fsmSnapshot) Release() {}
