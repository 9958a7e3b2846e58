package cluster

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/rolter/rolter/cluster/raftstore"
	"github.com/rolter/rolter/config"
	"github.com/rolter/rolter/internal/testwait"
)

// fileV1 is the rolter.toml a cluster is seeded from in these tests.
const fileV1 = `
generation = 1

[[providers]]
name = "a"
api_base = "http://127.0.0.1:8001/v1"

[[providers]]
name = "b"
api_base = "http://127.0.0.1:8002/v1"

[[routes]]
model = "chat"
targets = [{ provider = "a" }, { provider = "b" }]

[[provider_groups]]
name = "pool"
slug = "pool"
members = [{ provider = "a" }]

[[keys]]
name = "ci"
sha256 = "0000000000000000000000000000000000000000000000000000000000000001"
models = ["chat"]

[[models]]
model = "meta-llama/Llama-3.1-8B"
price_in_per_mtok = 0.2
price_out_per_mtok = 0.6
`

func parse(t *testing.T, toml string) *config.Config {
	t.Helper()
	c, err := config.Parse("rolter.toml", []byte(toml), func(string) string { return "" })
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// edit returns fileV1 at generation gen with each old→new replacement.
func edit(gen int, repl ...string) string {
	s := strings.Replace(fileV1, "generation = 1", fmt.Sprintf("generation = %d", gen), 1)
	return strings.NewReplacer(repl...).Replace(s)
}

// fsmApplier runs commands through the FSM's applyCommand with no Raft:
// the deterministic core the log replays on every router.
type fsmApplier struct {
	mu    sync.Mutex
	st    *State
	index uint64
	// before runs ahead of each Apply (tests use it to land a competing
	// command first).
	before func()
}

func (f *fsmApplier) State() *State {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.st
}

func (f *fsmApplier) Apply(_ context.Context, cmd *raftstore.Command) (*raftstore.Result, error) {
	if b := f.before; b != nil {
		f.before = nil
		b()
	}
	return f.apply(cmd), nil
}

func (f *fsmApplier) apply(cmd *raftstore.Command) *raftstore.Result {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.index++
	var res *raftstore.Result
	f.st, res = applyCommand(f.st, cmd, f.index)
	return res
}

// seeded is a state seeded from toml with the bootstrap superadmin.
func seeded(t *testing.T, toml string) *fsmApplier {
	t.Helper()
	f := &fsmApplier{st: emptyState()}
	res := f.apply(&raftstore.Command{Op: raftstore.Op_OP_SEED,
		Payload: &raftstore.Command_Seed{Seed: seedFromConfig(parse(t, toml), HashToken(testSuperadmin))}})
	if res.GetCode() != raftstore.Code_CODE_OK {
		t.Fatalf("seed: %v", res)
	}
	return f
}

func fileSyncAudits(st *State) []AuditEntry {
	var out []AuditEntry
	for _, e := range st.Audit {
		if e.Action == "config.file_sync" {
			out = append(out, e)
		}
	}
	return out
}

func TestCheckRevision(t *testing.T) {
	h1, h2 := "1111111111111111", "2222222222222222"
	for _, tc := range []struct {
		name      string
		have      FileRevision
		want      FileRevision
		changed   bool
		wantError error
	}{
		{"nothing synced yet", FileRevision{}, FileRevision{0, h1}, true, nil},
		{"higher generation", FileRevision{1, h1}, FileRevision{2, h2}, true, nil},
		{"higher generation, same content", FileRevision{1, h1}, FileRevision{2, h1}, true, nil},
		{"same file", FileRevision{2, h1}, FileRevision{2, h1}, false, nil},
		{"older generation, same content", FileRevision{2, h1}, FileRevision{1, h1}, false, nil},
		{"same generation, other content", FileRevision{2, h1}, FileRevision{2, h2}, false, ErrGenerationReused},
		{"older generation", FileRevision{3, h1}, FileRevision{2, h2}, false, ErrOlderGeneration},
	} {
		t.Run(tc.name, func(t *testing.T) {
			changed, err := CheckRevision(tc.have, tc.want)
			if changed != tc.changed || !errors.Is(err, tc.wantError) || (tc.wantError == nil) != (err == nil) {
				t.Fatalf("CheckRevision(%v, %v) = %v, %v; want %v, %v", tc.have, tc.want, changed, err, tc.changed, tc.wantError)
			}
			if err != nil && !errors.Is(err, ErrFileRefused) {
				t.Fatalf("%v does not wrap ErrFileRefused", err)
			}
		})
	}
}

func TestFileRevisionIgnoresCommentsOrderAndLocalSections(t *testing.T) {
	base := FileRevisionOf(parse(t, fileV1))
	reordered := strings.Replace(fileV1, "generation = 1\n", "generation = 1\n# a comment\n[retry]\nattempts = 5\n\n", 1)
	if got := FileRevisionOf(parse(t, reordered)); got != base {
		t.Errorf("a comment and [retry] changed the revision: %v vs %v", got, base)
	}
	if got := FileRevisionOf(parse(t, edit(1, "8002", "8003"))); got.SHA256 == base.SHA256 {
		t.Error("a changed api_base kept the hash")
	}
	if got := FileRevisionOf(parse(t, edit(1, "price_out_per_mtok = 0.6", "price_out_per_mtok = 0.7"))); got.SHA256 == base.SHA256 {
		t.Error("a changed model price kept the hash")
	}
}

func TestSeedMakesEveryFileEntryFileOwned(t *testing.T) {
	st := seeded(t, fileV1).State()
	if st.File != FileRevisionOf(parse(t, fileV1)) {
		t.Fatalf("seeded revision %v", st.File)
	}
	if !st.Providers["a"].ReadOnly || !st.Routes["chat"].ReadOnly || !st.Groups["pool"].ReadOnly || !st.Keys["ci"].ReadOnly ||
		!st.Models["meta-llama/Llama-3.1-8B"].ReadOnly {
		t.Fatal("seeded entries are not read-only (file-owned)")
	}
	// The admin API cannot change a file-owned entry, and its answer names the file.
	f := seeded(t, fileV1)
	res := f.apply(&raftstore.Command{Op: raftstore.Op_OP_UPDATE_PROVIDER, ActorTokenSha256: HashToken(testSuperadmin),
		Payload: &raftstore.Command_Provider{Provider: &raftstore.Provider{Name: "a", ApiBase: "http://127.0.0.1:9/v1"}}})
	if res.GetCode() != raftstore.Code_CODE_READONLY || !strings.Contains(res.GetMessage(), "rolter.toml") {
		t.Fatalf("update of a file-owned provider: %v", res)
	}
}

func TestPlanFileSyncDiffAndApply(t *testing.T) {
	f := seeded(t, fileV1)
	// An entry created through the admin API, which no file sync touches.
	res := f.apply(&raftstore.Command{Op: raftstore.Op_OP_CREATE_PROVIDER, ActorTokenSha256: HashToken(testSuperadmin),
		Payload: &raftstore.Command_Provider{Provider: &raftstore.Provider{Name: "api-made", ApiBase: "http://127.0.0.1:9/v1"}}})
	if res.GetCode() != raftstore.Code_CODE_OK {
		t.Fatal(res)
	}
	v2 := edit(2, `api_base = "http://127.0.0.1:8002/v1"`, `api_base = "http://127.0.0.1:9002/v1"`,
		"[[provider_groups]]\nname = \"pool\"\nslug = \"pool\"\nmembers = [{ provider = \"a\" }]\n",
		"[[routes]]\nmodel = \"solo\"\nstrategy = \"power_of_two\"\ntargets = [{ provider = \"b\", weight = 2 }]\n")
	before := f.State()
	plan := PlanFileSync(before, parse(t, v2))
	want := []string{
		"~ provider/b api_base: http://127.0.0.1:8002/v1 → http://127.0.0.1:9002/v1",
		"+ route/solo strategy=power_of_two targets=[b:solo×2] discover=false max_loras=0",
		"- provider_group/pool",
	}
	if !slices.Equal(plan.Changes, want) {
		t.Fatalf("changes:\n%s\nwant:\n%s", strings.Join(plan.Changes, "\n"), strings.Join(want, "\n"))
	}
	if plan.Err != nil || plan.Sync == nil {
		t.Fatalf("plan refused: %v", plan.Err)
	}
	synced, err := SyncFile(context.Background(), f, parse(t, v2), FileSender{Origin: "file:r2"})
	if err != nil || synced.Outcome != FileApplied {
		t.Fatalf("sync: %+v %v", synced, err)
	}
	st := f.State()
	if got := st.Providers["b"].APIBase; got != "http://127.0.0.1:9002/v1" {
		t.Errorf("provider b api_base %q", got)
	}
	if _, ok := st.Groups["pool"]; ok {
		t.Error("provider group pool survived its removal from the file")
	}
	if r, ok := st.Routes["solo"]; !ok || !r.ReadOnly {
		t.Errorf("route solo: %+v %v (want file-owned)", r, ok)
	}
	if p := st.Providers["api-made"]; p.ReadOnly || p.APIBase != "http://127.0.0.1:9/v1" {
		t.Errorf("the API-created provider changed: %+v", p)
	}
	if st.File.Generation != 2 || st.ConfigVersion != before.ConfigVersion+1 {
		t.Errorf("revision %v, config_version %d (was %d)", st.File, st.ConfigVersion, before.ConfigVersion)
	}
	audits := fileSyncAudits(st)
	if len(audits) != 1 || audits[0].Actor != "file:r2" || audits[0].Outcome != "ok" || !slices.Equal(audits[0].Diff, want) {
		t.Fatalf("audit: %+v", audits)
	}
}

func TestFileSyncOfTheSameFileTwiceIsOneChange(t *testing.T) {
	f := seeded(t, fileV1)
	v2 := parse(t, edit(2, "8001", "9001"))
	// Two routers compute their command against the same state, then
	// both reach the leader.
	p1, p2 := PlanFileSync(f.State(), v2), PlanFileSync(f.State(), v2)
	cmd := func(p FilePlan, origin string) *raftstore.Command {
		p.Sync.Origin = origin
		return &raftstore.Command{Op: raftstore.Op_OP_FILE_SYNC, Payload: &raftstore.Command_FileSync{FileSync: p.Sync}}
	}
	v0 := f.State().ConfigVersion
	r1, r2 := f.apply(cmd(p1, "file:r1")), f.apply(cmd(p2, "file:r2"))
	if r1.GetCode() != raftstore.Code_CODE_OK || r2.GetCode() != raftstore.Code_CODE_OK || !r2.GetUnchanged() {
		t.Fatalf("results %v / %v", r1, r2)
	}
	st := f.State()
	if st.ConfigVersion != v0+1 || len(fileSyncAudits(st)) != 1 {
		t.Fatalf("config_version %d (from %d), %d file_sync audits; want one change", st.ConfigVersion, v0, len(fileSyncAudits(st)))
	}
	if r, err := SyncFile(context.Background(), f, v2, FileSender{Origin: "file:r3"}); err != nil || r.Outcome != FileUnchanged {
		t.Fatalf("a third router with the same file: %+v %v", r, err)
	}
}

func TestOlderGenerationCannotRollBack(t *testing.T) {
	f := seeded(t, fileV1)
	v3 := parse(t, edit(3, "8001", "9001"))
	if _, err := SyncFile(context.Background(), f, v3, FileSender{Origin: "file:new"}); err != nil {
		t.Fatal(err)
	}
	old := parse(t, edit(2, "8001", "7001"))
	// The router's own check refuses before sending...
	r, err := SyncFile(context.Background(), f, old, FileSender{Origin: "file:old"})
	if !errors.Is(err, ErrOlderGeneration) || r.Outcome != FileRefused {
		t.Fatalf("older file: %+v %v", r, err)
	}
	// ...and the FSM refuses a command that was computed before the
	// newer file landed.
	f2 := seeded(t, fileV1)
	stale := PlanFileSync(f2.State(), old)
	if _, err := SyncFile(context.Background(), f2, v3, FileSender{Origin: "file:new"}); err != nil {
		t.Fatal(err)
	}
	res := f2.apply(&raftstore.Command{Op: raftstore.Op_OP_FILE_SYNC, Payload: &raftstore.Command_FileSync{FileSync: stale.Sync}})
	if res.GetCode() != raftstore.Code_CODE_CONFLICT || !strings.Contains(res.GetMessage(), "older") {
		t.Fatalf("stale command: %v", res)
	}
	for _, st := range []*State{f.State(), f2.State()} {
		if got := st.Providers["a"].APIBase; got != "http://127.0.0.1:9001/v1" || st.File.Generation != 3 {
			t.Fatalf("rolled back: api_base %q, revision %v", got, st.File)
		}
	}
}

func TestSameGenerationWithOtherContentIsRefused(t *testing.T) {
	f := seeded(t, fileV1)
	r, err := SyncFile(context.Background(), f, parse(t, edit(1, "8001", "9001")), FileSender{Origin: "file:r1"})
	if !errors.Is(err, ErrGenerationReused) || !strings.Contains(r.Message, "raise generation in rolter.toml to 2") {
		t.Fatalf("%+v %v", r, err)
	}
	if len(r.Changes) != 1 {
		t.Errorf("a refusal still reports the difference: %v", r.Changes)
	}
	if got := f.State().Providers["a"].APIBase; got != "http://127.0.0.1:8001/v1" {
		t.Fatalf("applied anyway: %q", got)
	}
}

func TestSyncRecomputesWhenAnotherFileLandedFirst(t *testing.T) {
	f := seeded(t, fileV1)
	// generation 2 adds provider c; generation 3 does not have it. The
	// generation-3 router computed its difference against generation 1,
	// then generation 2 landed first: its command no longer fits.
	v2 := parse(t, edit(2)+"\n[[providers]]\nname = \"c\"\napi_base = \"http://127.0.0.1:8003/v1\"\n")
	v3 := parse(t, edit(3, "8001", "9001"))
	f.before = func() {
		p := PlanFileSync(f.State(), v2)
		f.apply(&raftstore.Command{Op: raftstore.Op_OP_FILE_SYNC, Payload: &raftstore.Command_FileSync{FileSync: p.Sync}})
	}
	r, err := SyncFile(context.Background(), f, v3, FileSender{Origin: "file:r3"})
	if err != nil || r.Outcome != FileApplied {
		t.Fatalf("%+v %v", r, err)
	}
	st := f.State()
	if _, ok := st.Providers["c"]; ok {
		t.Error("provider c of generation 2 survived generation 3")
	}
	if st.File.Generation != 3 || st.Providers["a"].APIBase != "http://127.0.0.1:9001/v1" {
		t.Errorf("revision %v, a=%q", st.File, st.Providers["a"].APIBase)
	}
	outcomes := []string{}
	for _, e := range fileSyncAudits(st) {
		outcomes = append(outcomes, e.Outcome)
	}
	if !slices.Equal(outcomes, []string{"ok", "conflict", "ok"}) {
		t.Errorf("file_sync audit outcomes %v", outcomes)
	}
}

func TestFileSyncKeepsProvidersAnAPIRouteNeeds(t *testing.T) {
	f := seeded(t, fileV1)
	res := f.apply(&raftstore.Command{Op: raftstore.Op_OP_CREATE_ROUTE, ActorTokenSha256: HashToken(testSuperadmin),
		Payload: &raftstore.Command_Route{Route: &raftstore.Route{Model: "api-route", Strategy: "round_robin",
			Targets: []*raftstore.Target{{Provider: "b", Model: "m", Weight: 1}}}}})
	if res.GetCode() != raftstore.Code_CODE_OK {
		t.Fatal(res)
	}
	noB := edit(2, "[[providers]]\nname = \"b\"\napi_base = \"http://127.0.0.1:8002/v1\"\n", "",
		`targets = [{ provider = "a" }, { provider = "b" }]`, `targets = [{ provider = "a" }]`)
	r, err := SyncFile(context.Background(), f, parse(t, noB), FileSender{Origin: "file:r1"})
	if !errors.Is(err, ErrFileRefused) || !strings.Contains(r.Message, `route "api-route" (from the admin API) targets provider "b"`) {
		t.Fatalf("%+v %v", r, err)
	}
	st := f.State()
	if _, ok := st.Providers["b"]; !ok || st.File.Generation != 1 {
		t.Fatalf("the refused sync changed the state: b present %v, revision %v", ok, st.File)
	}
}

func TestAdminTokenFileSyncNeedsAdminRole(t *testing.T) {
	f := seeded(t, fileV1)
	res := f.apply(&raftstore.Command{Op: raftstore.Op_OP_CREATE_TOKEN, ActorTokenSha256: HashToken(testSuperadmin),
		Payload: &raftstore.Command_Token{Token: tokenToPB(AdminToken{Name: "v", SHA256: HashToken("viewer-tok"), Role: RoleViewer})}})
	if res.GetCode() != raftstore.Code_CODE_OK {
		t.Fatal(res)
	}
	v2 := parse(t, edit(2, "8001", "9001"))
	r, err := SyncFile(context.Background(), f, v2, FileSender{Actor: "v", TokenSHA256: HashToken("viewer-tok")})
	if !errors.Is(err, ErrFileRefused) || !strings.Contains(r.Message, "requires the admin role") {
		t.Fatalf("viewer sync: %+v %v", r, err)
	}
	r, err = SyncFile(context.Background(), f, v2, FileSender{Actor: "x", TokenSHA256: HashToken(testSuperadmin)})
	if err != nil || r.Outcome != FileApplied {
		t.Fatalf("superadmin sync: %+v %v", r, err)
	}
	if a := fileSyncAudits(f.State()); a[len(a)-1].Actor != "bootstrap" {
		t.Errorf("audited as %q, want the token's name", a[len(a)-1].Actor)
	}
}

func TestSnapshotKeepsFileRevisionAndAuditDiff(t *testing.T) {
	f := seeded(t, fileV1)
	if _, err := SyncFile(context.Background(), f, parse(t, edit(2, "8001", "9001")), FileSender{Origin: "file:r1"}); err != nil {
		t.Fatal(err)
	}
	st := f.State()
	back := stateFromSnapshot(st.toSnapshot())
	if back.File != st.File {
		t.Errorf("revision %v after restore, want %v", back.File, st.File)
	}
	a, b := fileSyncAudits(st), fileSyncAudits(back)
	if len(b) != 1 || !slices.Equal(a[0].Diff, b[0].Diff) {
		t.Errorf("audit diff after restore %+v, want %+v", b, a)
	}
}

func TestRoutersSyncingOneFileAtOnceMakeOneChange(t *testing.T) {
	c := newCluster(t, 3)
	v0 := c.Node(0).State().ConfigVersion
	file := seedConfig()
	file.Generation = 7
	file.Providers[0].APIBase = "http://127.0.0.1:8999/v1"
	var wg sync.WaitGroup
	results := make([]FileSyncResult, c.Len())
	errs := make([]error, c.Len())
	for i := range c.Len() {
		wg.Add(1)
		go func() {
			defer wg.Done()
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			results[i], errs[i] = SyncFile(ctx, c.Node(i), file, FileSender{Origin: "file:" + c.Node(i).NodeID()})
		}()
	}
	wg.Wait()
	applied := 0
	for i := range results {
		if errs[i] != nil {
			t.Fatalf("router %d: %v", i, errs[i])
		}
		if results[i].Outcome == FileApplied {
			applied++
		}
	}
	for i := range c.Len() {
		testwait.For(t, 5*time.Second, "generation 7 on every router", func() bool { return c.Node(i).State().File.Generation == 7 })
	}
	st := c.Node(0).State()
	if applied != 1 || st.ConfigVersion != v0+1 || len(fileSyncAudits(st)) != 1 {
		t.Fatalf("%d routers applied, config_version %d (from %d), %d audits; want one change", applied, st.ConfigVersion, v0,
			len(fileSyncAudits(st)))
	}
	if got := st.Providers["vllm-a"].APIBase; got != "http://127.0.0.1:8999/v1" {
		t.Fatalf("api_base %q", got)
	}
}

func TestFileSyncerSyncsOnStartAndKickAndCountsRefusals(t *testing.T) {
	c := newCluster(t, 1)
	node := c.Node(0)
	v1 := seedConfig()
	v1.Generation = 1
	v1.Providers[0].APIBase = "http://127.0.0.1:8100/v1"
	reg := prometheus.NewRegistry()
	fs, err := NewFileSyncer(node, v1, reg, discard())
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { fs.Run(ctx); close(done) }()
	defer func() { cancel(); <-done }()

	// sample reads one series from reg: the counter with result=label,
	// or the gauge when label is "".
	sample := func(name, label string) float64 {
		mfs, err := reg.Gather()
		if err != nil {
			t.Fatal(err)
		}
		for _, mf := range mfs {
			if mf.GetName() != name {
				continue
			}
			for _, m := range mf.GetMetric() {
				if label == "" {
					return m.GetGauge().GetValue()
				}
				if len(m.GetLabel()) == 1 && m.GetLabel()[0].GetValue() == label {
					return m.GetCounter().GetValue()
				}
			}
		}
		t.Fatalf("%s{%s} not registered", name, label)
		return 0
	}
	count := func(result string) float64 { return sample("rolter_config_file_sync_total", result) }
	gauge := func() float64 { return sample("rolter_config_file_out_of_sync", "") }
	testwait.For(t, 5*time.Second, "the file synced on start", func() bool {
		return node.State().Providers["vllm-a"].APIBase == "http://127.0.0.1:8100/v1" && count(FileApplied) == 1
	})
	if g := gauge(); g != 0 {
		t.Errorf("out_of_sync %v after the sync, want 0", g)
	}

	older := seedConfig()
	older.Providers[0].APIBase = "http://127.0.0.1:8200/v1" // generation 0 < 1
	fs.Kick(older)
	testwait.For(t, 5*time.Second, "the older file refused", func() bool { return count(FileRefused) == 1 })
	if g := gauge(); g != 1 {
		t.Errorf("out_of_sync %v with an older file, want 1", g)
	}
	if got := node.State().Providers["vllm-a"].APIBase; got != "http://127.0.0.1:8100/v1" {
		t.Fatalf("rolled back to %q", got)
	}

	v2 := seedConfig()
	v2.Generation = 2
	fs.Kick(v2)
	testwait.For(t, 5*time.Second, "generation 2 applied on SIGHUP", func() bool {
		return node.State().File.Generation == 2 && count(FileApplied) == 2
	})
	if g := gauge(); g != 0 {
		t.Errorf("out_of_sync %v after generation 2, want 0", g)
	}
}

func TestFileAdoptsAnAPIEntryUnderItsName(t *testing.T) {
	f := seeded(t, fileV1)
	res := f.apply(&raftstore.Command{Op: raftstore.Op_OP_CREATE_PROVIDER, ActorTokenSha256: HashToken(testSuperadmin),
		Payload: &raftstore.Command_Provider{Provider: &raftstore.Provider{Name: "c", ApiBase: "http://127.0.0.1:9/v1"}}})
	if res.GetCode() != raftstore.Code_CODE_OK {
		t.Fatal(res)
	}
	v2 := parse(t, edit(2)+"\n[[providers]]\nname = \"c\"\napi_base = \"http://127.0.0.1:8003/v1\"\n")
	want := []string{"~ provider/c managed_by: api → file", "~ provider/c api_base: http://127.0.0.1:9/v1 → http://127.0.0.1:8003/v1"}
	if got := PlanFileSync(f.State(), v2).Changes; !slices.Equal(got, want) {
		t.Fatalf("plan:\n%s", strings.Join(got, "\n"))
	}
	if _, err := SyncFile(context.Background(), f, v2, FileSender{Origin: "file:r1"}); err != nil {
		t.Fatal(err)
	}
	a := fileSyncAudits(f.State())
	if !slices.Equal(a[len(a)-1].Diff, want) {
		t.Fatalf("audit diff %v", a[len(a)-1].Diff)
	}
	if p := f.State().Providers["c"]; !p.ReadOnly || p.APIBase != "http://127.0.0.1:8003/v1" {
		t.Fatalf("provider c: %+v, want file-owned at the file's address", p)
	}
}

// The [[models]] price catalog is file-owned like every other declared
// kind: an edited price reaches the state, a removed entry goes, an entry
// the admin API created stays, and the API cannot change the file's.
func TestFileSyncOwnsTheModelPriceCatalog(t *testing.T) {
	const model = "meta-llama/Llama-3.1-8B"
	f := seeded(t, fileV1)
	su := HashToken(testSuperadmin)
	setPrice := func(name string, in, out float64) *raftstore.Result {
		return f.apply(&raftstore.Command{Op: raftstore.Op_OP_SET_MODEL_PRICE, ActorTokenSha256: su,
			Payload: &raftstore.Command_ModelPrice{ModelPrice: &raftstore.ModelPrice{Model: name, PriceInPerMtok: in, PriceOutPerMtok: out}}})
	}
	if res := setPrice(model, 9, 9); res.GetCode() != raftstore.Code_CODE_READONLY || !strings.Contains(res.GetMessage(), "managed by rolter.toml") {
		t.Fatalf("API update of a file-owned price: %v", res)
	}
	if res := f.apply(&raftstore.Command{Op: raftstore.Op_OP_DELETE_MODEL_PRICE, ActorTokenSha256: su,
		Payload: &raftstore.Command_Name{Name: model}}); res.GetCode() != raftstore.Code_CODE_READONLY {
		t.Fatalf("API delete of a file-owned price: %v", res)
	}
	if res := setPrice("api-model", 1, 2); res.GetCode() != raftstore.Code_CODE_OK {
		t.Fatal(res)
	}

	v2 := parse(t, edit(2, "price_in_per_mtok = 0.2", "price_in_per_mtok = 0.25")+
		"\n[[models]]\nmodel = \"qwen\"\nprice_in_per_mtok = 0.1\nprice_out_per_mtok = 0.3\n")
	want := []string{
		"~ model/meta-llama/Llama-3.1-8B price_in_per_mtok: 0.2 → 0.25",
		"+ model/qwen price_in_per_mtok=0.1 price_out_per_mtok=0.3",
	}
	if got := PlanFileSync(f.State(), v2).Changes; !slices.Equal(got, want) {
		t.Fatalf("plan:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
	if r, err := SyncFile(context.Background(), f, v2, FileSender{Origin: "file:r1"}); err != nil || r.Outcome != FileApplied {
		t.Fatalf("sync: %+v %v", r, err)
	}
	st := f.State()
	if m := st.Models[model]; !m.ReadOnly || m.PriceInPerMtok != 0.25 || m.PriceOutPerMtok != 0.6 {
		t.Errorf("edited price: %+v", m)
	}
	if m := st.Models["qwen"]; !m.ReadOnly || m.PriceOutPerMtok != 0.3 {
		t.Errorf("added price: %+v", m)
	}
	if cfg := st.Config(nil); len(cfg.Models) != 3 {
		t.Errorf("data-plane catalog %+v, want 3 entries", cfg.Models)
	}
	a := fileSyncAudits(st)
	if len(a) != 1 || !slices.Equal(a[0].Diff, want) {
		t.Fatalf("audit: %+v", a)
	}

	// Dropping every [[models]] entry removes the file's, not the API's.
	v3 := parse(t, strings.Replace(fileV1, "generation = 1", "generation = 3", 1)[:strings.Index(fileV1, "[[models]]")])
	if got := PlanFileSync(f.State(), v3).Changes; !slices.Equal(got, []string{"- model/" + model, "- model/qwen"}) {
		t.Fatalf("plan of the removal: %v", got)
	}
	if _, err := SyncFile(context.Background(), f, v3, FileSender{Origin: "file:r1"}); err != nil {
		t.Fatal(err)
	}
	st = f.State()
	if _, ok := st.Models[model]; ok {
		t.Error("a price removed from the file survived")
	}
	if m, ok := st.Models["api-model"]; !ok || m.ReadOnly || m.PriceOutPerMtok != 2 {
		t.Errorf("the API-created price changed: %+v %v", m, ok)
	}
}

// A catalog entry the admin API created under a model the file declares
// becomes the file's, and the diff says so.
func TestFileAdoptsAnAPIModelPrice(t *testing.T) {
	f := seeded(t, fileV1)
	res := f.apply(&raftstore.Command{Op: raftstore.Op_OP_SET_MODEL_PRICE, ActorTokenSha256: HashToken(testSuperadmin),
		Payload: &raftstore.Command_ModelPrice{ModelPrice: &raftstore.ModelPrice{Model: "qwen", PriceInPerMtok: 1, PriceOutPerMtok: 2}}})
	if res.GetCode() != raftstore.Code_CODE_OK {
		t.Fatal(res)
	}
	v2 := parse(t, edit(2)+"\n[[models]]\nmodel = \"qwen\"\nprice_in_per_mtok = 1\nprice_out_per_mtok = 3\n")
	want := []string{"~ model/qwen managed_by: api → file", "~ model/qwen price_out_per_mtok: 2 → 3"}
	if got := PlanFileSync(f.State(), v2).Changes; !slices.Equal(got, want) {
		t.Fatalf("plan:\n%s", strings.Join(got, "\n"))
	}
	if _, err := SyncFile(context.Background(), f, v2, FileSender{Origin: "file:r1"}); err != nil {
		t.Fatal(err)
	}
	if m := f.State().Models["qwen"]; !m.ReadOnly || m.PriceOutPerMtok != 3 {
		t.Fatalf("qwen: %+v, want file-owned at the file's price", m)
	}
}
