package cluster

import (
	"bufio"
	"bytes"
	"io"
	"log/slog"
	"testing"

	"github.com/hashicorp/raft"
	"github.com/rolter/rolter/cluster/raftstore"
	"github.com/rolter/rolter/config"
	"google.golang.org/protobuf/proto"
)

// The fuzz targets below decode what arrives from the Raft log, a snapshot
// or the forwarding port. A replica that panics on a log entry stops
// applying the log for good, so none of them may panic. Seed corpora live
// in testdata/fuzz/<Target>/ and run on every `go test`.

// fuzzSeedConfig is a small seeded cluster for the fuzzers to mutate.
func fuzzSeedConfig() *config.Config {
	return &config.Config{
		Providers: []config.Provider{{Name: "p", APIBase: "http://127.0.0.1:9/v1"}},
		Routes: []config.Route{{Model: "chat", Strategy: "round_robin",
			Targets: []config.Target{{Provider: "p", Model: "m"}}}},
	}
}

// seededFSM returns an FSM that applied the first-bootstrap seed (with a
// superadmin token hashed from "root") at index 1.
func seededFSM(t testing.TB) *fsm {
	f := newFSM(slog.New(slog.DiscardHandler))
	seed := &raftstore.Command{Op: raftstore.Op_OP_SEED,
		Payload: &raftstore.Command_Seed{Seed: seedFromConfig(fuzzSeedConfig(), HashToken("root"))}}
	b, err := proto.Marshal(seed)
	if err != nil {
		t.Fatal(err)
	}
	if res, ok := f.Apply(&raft.Log{Index: 1, Data: b}).(*raftstore.Result); !ok || res.GetCode() != raftstore.Code_CODE_OK {
		t.Fatalf("seed: %v", res)
	}
	return f
}

// canonical is the deterministic encoding of an FSM's state.
func canonical(t testing.TB, f *fsm) []byte {
	b, err := proto.MarshalOptions{Deterministic: true}.Marshal(f.state.Load().toSnapshot())
	if err != nil {
		t.Fatalf("encoding the state: %v", err)
	}
	return b
}

func fuzzCommandSeeds(f *testing.F) {
	root := HashToken("root")
	cmds := []*raftstore.Command{
		{Op: raftstore.Op_OP_CREATE_PROVIDER, ActorTokenSha256: root, Actor: "bootstrap",
			Payload: &raftstore.Command_Provider{Provider: providerToPB(config.Provider{Name: "q", APIBase: "http://127.0.0.1:10/v1"})}},
		{Op: raftstore.Op_OP_CREATE_ROUTE, ActorTokenSha256: root, IdempotencyKey: "k1",
			Payload: &raftstore.Command_Route{Route: routeToPB(config.Route{Model: "r2", Strategy: "least_loaded",
				Targets: []config.Target{{Provider: "p", Model: "m", Weight: 2}}})}},
		{Op: raftstore.Op_OP_DELETE_PROVIDER, ActorTokenSha256: root, Payload: &raftstore.Command_Name{Name: "p"}},
		{Op: raftstore.Op_OP_CREATE_TOKEN, ActorTokenSha256: HashToken("nobody"),
			Payload: &raftstore.Command_Token{Token: tokenToPB(AdminToken{Name: "t", SHA256: HashToken("t"), Role: RoleSuperadmin})}},
		{Op: raftstore.Op_OP_SET_POLICY, ActorTokenSha256: root, Payload: &raftstore.Command_Policy{Policy: &raftstore.Policy{
			Enabled: true, LatencyWeight: -1, ExplorationRatio: 7}}},
		{Op: raftstore.Op_OP_SEED, Payload: &raftstore.Command_Seed{Seed: &raftstore.Seed{}}},
		{Op: raftstore.Op_OP_FILE_SYNC, Payload: &raftstore.Command_FileSync{FileSync: &raftstore.FileSync{
			Revision: &raftstore.FileRevision{Generation: 1, Sha256: "aa"}, Base: revisionToPB(FileRevisionOf(fuzzSeedConfig())),
			PutProviders: []*raftstore.Provider{providerToPB(config.Provider{Name: "p", APIBase: "http://127.0.0.1:11/v1"})},
			DeleteRoutes: []string{"chat"}, Origin: "file:fuzz"}}},
		{Op: raftstore.Op_OP_FILE_SYNC, Payload: &raftstore.Command_FileSync{FileSync: &raftstore.FileSync{
			Revision: &raftstore.FileRevision{Generation: 2}, DeleteProviders: []string{"p", "nope"}}}},
		{Op: raftstore.Op_OP_FILE_SYNC},
		{Op: raftstore.Op(999)},
	}
	for _, c := range cmds {
		b, err := proto.Marshal(c)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b)
	}
	f.Add([]byte{})
	f.Add([]byte{0xff, 0xff, 0xff})
}

// FuzzFSMApply applies an arbitrary log entry to a seeded FSM. It must
// never panic, must return a *raftstore.Result, must leave a state that two
// replicas reach identically, and that state must survive a snapshot and
// restore unchanged.
func FuzzFSMApply(f *testing.F) {
	fuzzCommandSeeds(f)
	f.Fuzz(func(t *testing.T, data []byte) {
		a, b := seededFSM(t), seededFSM(t)
		for _, m := range []*fsm{a, b} {
			if _, ok := m.Apply(&raft.Log{Index: 2, Data: bytes.Clone(data)}).(*raftstore.Result); !ok {
				t.Fatal("Apply did not return a *raftstore.Result")
			}
		}
		sa := canonical(t, a)
		if !bytes.Equal(sa, canonical(t, b)) {
			t.Fatal("two replicas applying the same entry diverged")
		}
		snap, err := a.Snapshot()
		if err != nil {
			t.Fatal(err)
		}
		var sink memSink
		if err := snap.Persist(&sink); err != nil || sink.cancelled || !sink.closed {
			t.Fatalf("persist: %v (cancelled %v)", err, sink.cancelled)
		}
		r := newFSM(slog.New(slog.DiscardHandler))
		if err := r.Restore(io.NopCloser(&sink)); err != nil {
			t.Fatalf("restoring a persisted snapshot: %v", err)
		}
		if !bytes.Equal(sa, canonical(t, r)) {
			t.Fatal("state changed through snapshot and restore")
		}
	})
}

// FuzzFSMRestore restores an arbitrary snapshot. It must never panic; a
// snapshot it accepts must restore to a canonical state (restoring that
// state's own snapshot changes nothing), and commands must still apply
// on top of it.
func FuzzFSMRestore(f *testing.F) {
	good := seededFSM(f)
	b, err := proto.Marshal(good.state.Load().toSnapshot())
	if err != nil {
		f.Fatal(err)
	}
	f.Add(b)
	f.Add([]byte{})
	f.Add([]byte("\x0a\x03abc"))
	f.Fuzz(func(t *testing.T, data []byte) {
		m := newFSM(slog.New(slog.DiscardHandler))
		if err := m.Restore(io.NopCloser(bytes.NewReader(data))); err != nil {
			return
		}
		once := canonical(t, m)
		again := newFSM(slog.New(slog.DiscardHandler))
		if err := again.Restore(io.NopCloser(bytes.NewReader(once))); err != nil {
			t.Fatalf("restoring our own snapshot: %v", err)
		}
		if !bytes.Equal(once, canonical(t, again)) {
			t.Fatal("snapshot of a restored state is not stable")
		}
		cmd, _ := proto.Marshal(&raftstore.Command{Op: raftstore.Op_OP_DELETE_ROUTE,
			ActorTokenSha256: HashToken("root"), Payload: &raftstore.Command_Name{Name: "chat"}})
		if _, ok := m.Apply(&raft.Log{Index: 1 << 40, Data: cmd}).(*raftstore.Result); !ok {
			t.Fatal("Apply after Restore did not return a *raftstore.Result")
		}
	})
}

// FuzzReadFrame reads an arbitrary byte stream as forwarding RPC frames (what
// any peer on the Raft port can send before its MAC is checked). It must
// never panic nor allocate past the frame bound.
func FuzzReadFrame(f *testing.F) {
	var buf bytes.Buffer
	req := &raftstore.ForwardRequest{Kind: raftstore.RPCKind_RPC_APPLY, NodeId: "r1", RaftAddr: "127.0.0.1:1", Command: []byte{8, 1}}
	if err := writeFrame(&buf, req); err != nil {
		f.Fatal(err)
	}
	f.Add(buf.Bytes())
	f.Add([]byte{0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x01})
	f.Add([]byte{0x05, 0x08})
	f.Fuzz(func(t *testing.T, data []byte) {
		r := bufio.NewReader(bytes.NewReader(data))
		for range 8 {
			var req raftstore.ForwardRequest
			if err := readFrame(r, &req); err != nil {
				return
			}
		}
	})
}
