package cluster

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/rolter/rolter/cluster/raftstore"
	"github.com/rolter/rolter/config"
	"github.com/rolter/rolter/internal/testwait"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m, goleak.IgnoreAnyFunction("github.com/hashicorp/raft.(*InmemTransport).Timeout"))
}

const (
	testSuperadmin = "super-secret-token"
	testInternal   = "internal-token"
)

func discard() *slog.Logger { return slog.New(slog.DiscardHandler) }

func seedConfig() *config.Config {
	c := config.Default()
	c.Providers = []config.Provider{{Name: "vllm-a", APIBase: "http://127.0.0.1:8000/v1", ReadOnly: true}}
	c.Routes = []config.Route{{Model: "llama", Strategy: "adaptive", ReadOnly: true,
		Targets: []config.Target{{Provider: "vllm-a", Model: "llama", Weight: 1}}}}
	return &c
}

func newCluster(t *testing.T, n int) *InmemCluster {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	c, err := NewInmemCluster(ctx, n, StoreConfig{InternalToken: testInternal, SuperadminToken: testSuperadmin,
		Seed: seedConfig(), ForwardWait: 5 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	if _, err := c.WaitLeader(ctx); err != nil {
		t.Fatal(err)
	}
	for i := range n {
		testwait.For(t, 5*time.Second, "seed applied on "+c.Node(i).NodeID(), func() bool { return c.Node(i).State().Seeded })
	}
	return c
}

func providerCmd(name string, token string) *raftstore.Command {
	return &raftstore.Command{Op: raftstore.Op_OP_CREATE_PROVIDER, ActorTokenSha256: HashToken(token),
		Payload: &raftstore.Command_Provider{Provider: &raftstore.Provider{Name: name, ApiBase: "http://127.0.0.1:9/v1"}}}
}

func mustApply(t *testing.T, s *Store, cmd *raftstore.Command) *raftstore.Result {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	res, err := s.Apply(ctx, cmd)
	if err != nil {
		t.Fatalf("apply %s: %v", cmd.GetOp(), err)
	}
	return res
}

func follower(c *InmemCluster) int {
	l := c.Leader()
	for i := range c.Len() {
		if i != l && c.Node(i) != nil {
			return i
		}
	}
	return -1
}

func TestSeedReplicatesToEveryNode(t *testing.T) {
	c := newCluster(t, 3)
	for i := range 3 {
		st := c.Node(i).State()
		if _, ok := st.Providers["vllm-a"]; !ok {
			t.Errorf("%s: seeded provider missing", c.Node(i).NodeID())
		}
		if role, name := st.TokenRole(HashToken(testSuperadmin)); role != RoleSuperadmin || name != "bootstrap" {
			t.Errorf("%s: bootstrap token role %v name %q", c.Node(i).NodeID(), role, name)
		}
		if st.ConfigVersion != 1 {
			t.Errorf("%s: config_version %d after seed, want 1", c.Node(i).NodeID(), st.ConfigVersion)
		}
	}
}

func TestForwardedWriteFromFollowerReplicates(t *testing.T) {
	c := newCluster(t, 3)
	f := follower(c)
	watch := c.Node(0).Watch()
	res := mustApply(t, c.Node(f), providerCmd("p1", testSuperadmin))
	if res.GetCode() != raftstore.Code_CODE_OK {
		t.Fatalf("forwarded write: %v %s", res.GetCode(), res.GetMessage())
	}
	for i := range 3 {
		testwait.For(t, 3*time.Second, "p1 on "+c.Node(i).NodeID(), func() bool {
			_, ok := c.Node(i).State().Providers["p1"]
			return ok && c.Node(i).State().ConfigVersion == res.GetConfigVersion()
		})
	}
	select {
	case <-watch:
	case <-time.After(3 * time.Second):
		t.Fatal("Watch did not fire on a config_version bump")
	}
}

func TestLeaderLossKeepsAcknowledgedWrites(t *testing.T) {
	c := newCluster(t, 3)
	var acked []string
	write := func(via int, name string) {
		res := mustApply(t, c.Node(via), providerCmd(name, testSuperadmin))
		if res.GetCode() != raftstore.Code_CODE_OK {
			t.Fatalf("write %s: %v", name, res.GetMessage())
		}
		acked = append(acked, name)
	}
	for i := range 5 {
		write(follower(c), fmt.Sprintf("before-%d", i))
	}
	old := c.Leader()
	if err := c.Stop(old); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	nl, err := c.WaitLeader(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if nl == old {
		t.Fatal("stopped node is still leader")
	}
	// Writes through the surviving follower keep working.
	for i := range 5 {
		write(follower(c), fmt.Sprintf("after-%d", i))
	}
	for _, name := range acked {
		if _, ok := c.Node(nl).State().Providers[name]; !ok {
			t.Errorf("acknowledged write %s lost after leader change", name)
		}
	}
	// The old leader comes back and catches up.
	if err := c.Start(ctx, old); err != nil {
		t.Fatal(err)
	}
	testwait.For(t, 5*time.Second, "restarted node catches up", func() bool {
		return c.Node(old).State().ConfigVersion == c.Node(nl).State().ConfigVersion
	})
}

func TestApplyWithoutLeaderReturnsErrNoLeader(t *testing.T) {
	c := newCluster(t, 3)
	f := follower(c)
	for i := range 3 {
		if i != f {
			if err := c.Stop(i); err != nil {
				t.Fatal(err)
			}
		}
	}
	s := c.Node(f)
	s.cfg.ForwardWait = 300 * time.Millisecond
	_, err := s.Apply(context.Background(), providerCmd("orphan", testSuperadmin))
	if !errors.Is(err, ErrNoLeader) {
		t.Fatalf("apply with no quorum: err %v, want ErrNoLeader", err)
	}
}

func TestIdempotentRetryAppliesOnce(t *testing.T) {
	c := newCluster(t, 3)
	f := follower(c)
	cmd := providerCmd("idem", testSuperadmin)
	cmd.IdempotencyKey = "req-1"
	first := mustApply(t, c.Node(f), cmd)
	auditLen := len(c.Node(c.Leader()).State().Audit)
	// Retried through another node, even after the resource changed state:
	// the original result comes back and nothing applies again.
	retry := providerCmd("idem", testSuperadmin)
	retry.IdempotencyKey = "req-1"
	second := mustApply(t, c.Node(c.Leader()), retry)
	if first.GetCode() != raftstore.Code_CODE_OK || second.GetCode() != raftstore.Code_CODE_OK {
		t.Fatalf("results %v / %v, want OK twice (a second create would be CONFLICT)", first.GetCode(), second.GetCode())
	}
	if first.GetConfigVersion() != second.GetConfigVersion() {
		t.Errorf("retry config_version %d, original %d", second.GetConfigVersion(), first.GetConfigVersion())
	}
	if got := c.Node(c.Leader()).State(); got.ConfigVersion != first.GetConfigVersion() || len(got.Audit) != auditLen {
		t.Errorf("retry changed state: version %d (want %d), audit %d (want %d)", got.ConfigVersion, first.GetConfigVersion(), len(got.Audit), auditLen)
	}
	// A different key is a new write: the create now conflicts.
	other := providerCmd("idem", testSuperadmin)
	other.IdempotencyKey = "req-2"
	if r := mustApply(t, c.Node(f), other); r.GetCode() != raftstore.Code_CODE_CONFLICT {
		t.Errorf("second create with a new key: %v, want CONFLICT", r.GetCode())
	}
}

func TestFSMRejectsCommandsAboveTheTokenRole(t *testing.T) {
	c := newCluster(t, 3)
	s := c.Node(follower(c))
	for _, tok := range []struct{ name, secret, role string }{{"ops", "viewer-secret", "viewer"}, {"dev", "admin-secret", "admin"}} {
		res := mustApply(t, s, &raftstore.Command{Op: raftstore.Op_OP_CREATE_TOKEN, ActorTokenSha256: HashToken(testSuperadmin),
			Payload: &raftstore.Command_Token{Token: &raftstore.AdminToken{Name: tok.name, Sha256: HashToken(tok.secret),
				Role: raftstore.Role(ParseRole(tok.role))}}})
		if res.GetCode() != raftstore.Code_CODE_OK {
			t.Fatalf("create token %s: %v", tok.name, res.GetMessage())
		}
	}
	policy := &raftstore.Command_Policy{Policy: &raftstore.Policy{Enabled: true, LatencyWeight: 2, CostWeight: 1, LoadWeight: 1, ExplorationRatio: 0.1, MinSamples: 5}}
	tests := []struct {
		name   string
		token  string
		op     raftstore.Op
		code   raftstore.Code
		actor  string
		result string
	}{
		{"viewer cannot create a provider", "viewer-secret", raftstore.Op_OP_CREATE_PROVIDER, raftstore.Code_CODE_FORBIDDEN, "ops", "forbidden"},
		{"viewer cannot set the policy", "viewer-secret", raftstore.Op_OP_SET_POLICY, raftstore.Code_CODE_FORBIDDEN, "ops", "forbidden"},
		{"admin cannot set the policy", "admin-secret", raftstore.Op_OP_SET_POLICY, raftstore.Code_CODE_FORBIDDEN, "dev", "forbidden"},
		{"unknown token is refused", "nope", raftstore.Op_OP_CREATE_PROVIDER, raftstore.Code_CODE_UNAUTHENTICATED, "", "unauthenticated"},
		{"admin may create a provider", "admin-secret", raftstore.Op_OP_CREATE_PROVIDER, raftstore.Code_CODE_OK, "dev", "ok"},
		{"superadmin may set the policy", testSuperadmin, raftstore.Op_OP_SET_POLICY, raftstore.Code_CODE_OK, "bootstrap", "ok"},
	}
	for i, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cmd := &raftstore.Command{Op: tt.op, ActorTokenSha256: HashToken(tt.token)}
			if tt.op == raftstore.Op_OP_SET_POLICY {
				cmd.Payload = policy
			} else {
				cmd.Payload = providerCmd(fmt.Sprintf("p%d", i), tt.token).Payload
			}
			before := s.State().ConfigVersion
			res := mustApply(t, s, cmd)
			if res.GetCode() != tt.code {
				t.Fatalf("code %v (%s), want %v", res.GetCode(), res.GetMessage(), tt.code)
			}
			testwait.For(t, 3*time.Second, "audit entry", func() bool {
				a := s.State().Audit
				return len(a) > 0 && a[len(a)-1].Outcome == tt.result && a[len(a)-1].Action == actionName(tt.op)
			})
			a := s.State().Audit
			if last := a[len(a)-1]; tt.actor != "" && last.Actor != tt.actor {
				t.Errorf("audit actor %q, want %q", last.Actor, tt.actor)
			}
			if ok := tt.code == raftstore.Code_CODE_OK; ok != (s.State().ConfigVersion > before) {
				t.Errorf("config_version %d → %d with code %v", before, s.State().ConfigVersion, tt.code)
			}
		})
	}
	if got := s.State().Policy; !got.Enabled || got.LatencyWeight != 2 {
		t.Errorf("policy after superadmin update: %+v", got)
	}
}

func TestReadonlySeedEntriesCannotChange(t *testing.T) {
	c := newCluster(t, 1)
	s := c.Node(0)
	for _, cmd := range []*raftstore.Command{
		{Op: raftstore.Op_OP_DELETE_PROVIDER, Payload: &raftstore.Command_Name{Name: "vllm-a"}},
		{Op: raftstore.Op_OP_UPDATE_PROVIDER, Payload: &raftstore.Command_Provider{Provider: &raftstore.Provider{Name: "vllm-a", ApiBase: "http://127.0.0.1:1"}}},
		{Op: raftstore.Op_OP_DELETE_ROUTE, Payload: &raftstore.Command_Name{Name: "llama"}},
	} {
		cmd.ActorTokenSha256 = HashToken(testSuperadmin)
		if res := mustApply(t, s, cmd); res.GetCode() != raftstore.Code_CODE_READONLY {
			t.Errorf("%v on readonly entry: %v, want READONLY", cmd.GetOp(), res.GetCode())
		}
	}
}

func TestForwardWithWrongInternalTokenIsRejected(t *testing.T) {
	c := newCluster(t, 3)
	s := c.Node(follower(c))
	s.cfg.InternalToken = "wrong"
	_, err := s.Apply(context.Background(), providerCmd("x", testSuperadmin))
	if !errors.Is(err, ErrUnauthenticated) {
		t.Fatalf("err %v, want ErrUnauthenticated", err)
	}
	if _, ok := c.Node(c.Leader()).State().Providers["x"]; ok {
		t.Fatal("unauthenticated forward was applied")
	}
}

func TestStateConfigCarriesEverySection(t *testing.T) {
	c := newCluster(t, 1)
	st := c.Node(0).State()
	base := config.Default()
	base.Retry.Attempts = 7
	cfg := st.Config(&base)
	if cfg.Retry.Attempts != 7 {
		t.Errorf("process-local section lost: retry.attempts %d", cfg.Retry.Attempts)
	}
	if len(cfg.Providers) != 1 || cfg.Providers[0].Name != "vllm-a" || len(cfg.Routes) != 1 || cfg.Routes[0].Model != "llama" {
		t.Errorf("config from state: %+v %+v", cfg.Providers, cfg.Routes)
	}
	if got := st.AffectedRoutes(); len(got) != 1 || got[0] != "llama" {
		t.Errorf("affected routes %v", got)
	}
	if cfg.AdaptiveRouting.MinSamples != 50 {
		t.Errorf("policy default min_samples %d", cfg.AdaptiveRouting.MinSamples)
	}
}

func TestOpenRefusesInconsistentRaftTiming(t *testing.T) {
	// A leader lease longer than the heartbeat timeout would let a
	// deposed leader keep answering after a new one is elected.
	cfg := StoreConfig{NodeID: "r1", InsecureDev: true, RaftAddr: "127.0.0.1:0", InternalToken: testInternal,
		HeartbeatTimeout: 100 * time.Millisecond, ElectionTimeout: 100 * time.Millisecond, LeaderLeaseTimeout: time.Second}
	s, err := Open(t.Context(), cfg)
	if err == nil {
		s.Close()
		t.Fatal("Open accepted a leader lease longer than the heartbeat timeout")
	}
	if !errors.Is(err, ErrConfig) || !strings.Contains(err.Error(), "raft timing") {
		t.Fatalf("Open: %v, want an ErrConfig about raft timing", err)
	}
}
