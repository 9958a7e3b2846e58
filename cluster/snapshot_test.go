package cluster

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"testing"
	"time"

	"github.com/hashicorp/raft"
	"github.com/rolter/rolter/cluster/raftstore"
	"github.com/rolter/rolter/internal/testwait"
	"google.golang.org/protobuf/proto"
)

type memSink struct {
	bytes.Buffer
	failWrite         bool
	cancelled, closed bool
}

func (s *memSink) Write(p []byte) (int, error) {
	if s.failWrite {
		return 0, errors.New("disk full")
	}
	return s.Buffer.Write(p)
}
func (s *memSink) Close() error  { s.closed = true; return nil }
func (s *memSink) ID() string    { return "mem" }
func (s *memSink) Cancel() error { s.cancelled = true; return nil }

var _ raft.SnapshotSink = (*memSink)(nil)

func populatedFSM(t *testing.T) *fsm {
	t.Helper()
	f := newFSM(discard())
	apply := func(i uint64, cmd *raftstore.Command) {
		b, err := proto.Marshal(cmd)
		if err != nil {
			t.Fatal(err)
		}
		f.Apply(&raft.Log{Index: i, Type: raft.LogCommand, Data: b})
	}
	apply(1, &raftstore.Command{Op: raftstore.Op_OP_SEED, Payload: &raftstore.Command_Seed{Seed: seedFromConfig(seedConfig(), HashToken(testSuperadmin))}})
	for i := range 20 {
		cmd := providerCmd(fmt.Sprintf("p%d", i), testSuperadmin)
		cmd.IdempotencyKey = fmt.Sprintf("k%d", i)
		cmd.TimeUnixNano = int64(1_700_000_000_000_000_000 + i)
		apply(uint64(i+2), cmd)
	}
	apply(30, &raftstore.Command{Op: raftstore.Op_OP_SET_POLICY, ActorTokenSha256: HashToken(testSuperadmin), TimeUnixNano: 1,
		Payload: &raftstore.Command_Policy{Policy: &raftstore.Policy{Enabled: true, LatencyWeight: 3, CostWeight: 0, LoadWeight: 1, ExplorationRatio: 0.2, MinSamples: 9}}})
	return f
}

func TestSnapshotPersistRestoreRoundTrip(t *testing.T) {
	f := populatedFSM(t)
	snap, err := f.Snapshot()
	if err != nil {
		t.Fatal(err)
	}
	// Applying after the snapshot was taken must not leak into it.
	b, _ := proto.Marshal(providerCmd("late", testSuperadmin))
	f.Apply(&raft.Log{Index: 31, Type: raft.LogCommand, Data: b})

	sink := &memSink{}
	if err := snap.Persist(sink); err != nil || !sink.closed {
		t.Fatalf("persist: %v closed=%v", err, sink.closed)
	}
	g := newFSM(discard())
	if err := g.Restore(io.NopCloser(bytes.NewReader(sink.Bytes()))); err != nil {
		t.Fatal(err)
	}
	got := g.state.Load()
	if _, ok := got.Providers["late"]; ok {
		t.Error("snapshot contains a write applied after it was taken")
	}
	if len(got.Providers) != 21 || !got.Policy.Enabled || got.Policy.MinSamples != 9 {
		t.Errorf("restored: %d providers, policy %+v", len(got.Providers), got.Policy)
	}
	if !proto.Equal(got.toSnapshot(), snap.(*fsmSnapshot).state.toSnapshot()) {
		t.Error("restored state differs from the snapshot")
	}
	// Idempotency survives the restore: a retry returns the stored result
	// instead of conflicting.
	retry := providerCmd("p3", testSuperadmin)
	retry.IdempotencyKey = "k3"
	rb, _ := proto.Marshal(retry)
	if res := g.Apply(&raft.Log{Index: 40, Type: raft.LogCommand, Data: rb}).(*raftstore.Result); res.GetCode() != raftstore.Code_CODE_OK {
		t.Errorf("retry after restore: %v, want the original OK", res.GetCode())
	}
}

func TestPersistCancelsOnWriteError(t *testing.T) {
	f := populatedFSM(t)
	snap, _ := f.Snapshot()
	sink := &memSink{failWrite: true}
	if err := snap.Persist(sink); err == nil {
		t.Fatal("persist succeeded on a failing sink")
	}
	if !sink.cancelled || sink.closed {
		t.Errorf("cancelled=%v closed=%v, want cancelled and not closed", sink.cancelled, sink.closed)
	}
}

func TestAuditLogIsBounded(t *testing.T) {
	s := emptyState()
	for i := range AuditCapacity + 50 {
		s = s.clone()
		s.audit(AuditEntry{Action: fmt.Sprint(i)})
	}
	if len(s.Audit) != AuditCapacity || s.Audit[0].Action != "50" || s.Audit[len(s.Audit)-1].Seq != AuditCapacity+50 {
		t.Fatalf("audit len %d first %q last seq %d", len(s.Audit), s.Audit[0].Action, s.Audit[len(s.Audit)-1].Seq)
	}
}

func TestSnapshotRestoreInCluster(t *testing.T) {
	c := newCluster(t, 3)
	f := follower(c)
	for i := range 10 {
		mustApply(t, c.Node(f), providerCmd(fmt.Sprintf("s%d", i), testSuperadmin))
	}
	want := c.Node(c.Leader()).State().ConfigVersion
	for i := range 3 {
		testwait.For(t, 3*time.Second, "replicated", func() bool { return c.Node(i).State().ConfigVersion == want })
		if err := c.Node(i).raft.Snapshot().Error(); err != nil {
			t.Fatalf("snapshot on %d: %v", i, err)
		}
	}
	// Restart a node: it restores from its snapshot (state is rebuilt
	// before any log replay).
	if err := c.Stop(f); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := c.Start(ctx, f); err != nil {
		t.Fatal(err)
	}
	testwait.For(t, 5*time.Second, "restarted node restored", func() bool {
		st := c.Node(f).State()
		_, ok := st.Providers["s9"]
		return ok && st.ConfigVersion == want
	})
}
