package cluster

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/rolter/rolter/cluster/raftstore"
	"github.com/rolter/rolter/config"
)

func setAdmission(f *fsmApplier, token string, a config.Admission) *raftstore.Result {
	return f.apply(&raftstore.Command{Op: raftstore.Op_OP_SET_ADMISSION, ActorTokenSha256: HashToken(token),
		TimeUnixNano: time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC).UnixNano(),
		Payload:      &raftstore.Command_Admission{Admission: admissionToPB(a)}})
}

// The admin API's section reaches every router's config, needs the
// superadmin role, is validated and audited, and survives a snapshot.
func TestAdmissionIsReplicatedAndAudited(t *testing.T) {
	f := seeded(t, fileV1)
	if f.State().Admission.Enabled || f.State().Admission.ReadOnly {
		t.Fatalf("a file without [admission] seeds the defaults, API-owned: %+v", f.State().Admission)
	}
	res := f.apply(&raftstore.Command{Op: raftstore.Op_OP_CREATE_TOKEN, ActorTokenSha256: HashToken(testSuperadmin),
		Payload: &raftstore.Command_Token{Token: tokenToPB(AdminToken{Name: "ops", SHA256: HashToken("admin-tok"), Role: RoleAdmin})}})
	if res.GetCode() != raftstore.Code_CODE_OK {
		t.Fatal(res)
	}
	a := config.DefaultAdmission()
	a.Enabled, a.MaxEngineLoad = true, 32
	if res := setAdmission(f, "admin-tok", a); res.GetCode() != raftstore.Code_CODE_FORBIDDEN {
		t.Fatalf("admin token: %v, want forbidden (superadmin only)", res)
	}
	bad := a
	bad.MaxKVUsage = 2
	if res := setAdmission(f, testSuperadmin, bad); res.GetCode() != raftstore.Code_CODE_INVALID {
		t.Fatalf("kv usage 2: %v, want invalid", res)
	}
	if res := setAdmission(f, testSuperadmin, a); res.GetCode() != raftstore.Code_CODE_OK {
		t.Fatalf("superadmin: %v", res)
	}
	if got := f.State().Config(nil).Admission; !got.Enabled || got.MaxEngineLoad != 32 {
		t.Fatalf("data-plane config %+v", got)
	}
	last := f.State().Audit[len(f.State().Audit)-1]
	if last.Action != "admission.update" || last.Actor != "bootstrap" || last.Outcome != "ok" {
		t.Fatalf("audit %+v", last)
	}
	if got := stateFromSnapshot(f.State().toSnapshot()).Admission; got != f.State().Admission {
		t.Fatalf("after a snapshot %+v, want %+v", got, f.State().Admission)
	}
}

// A file that declares [admission] owns it: seeded read-only, refused
// through the API, changed by a file sync, handed back when the file
// drops it.
func TestDeclaredAdmissionIsFileOwned(t *testing.T) {
	withAdm := fileV1 + "\n[admission]\nenabled = true\nmax_engine_load = 16\n"
	f := seeded(t, withAdm)
	st := f.State().Admission
	if !st.ReadOnly || !st.Enabled || st.MaxEngineLoad != 16 {
		t.Fatalf("seeded %+v", st)
	}
	if res := setAdmission(f, testSuperadmin, config.DefaultAdmission()); res.GetCode() != raftstore.Code_CODE_READONLY {
		t.Fatalf("API change of a file-owned section: %v, want readonly", res)
	}
	v2 := parse(t, stringsReplace(withAdm, "generation = 1", "generation = 2", "max_engine_load = 16", "max_engine_load = 24"))
	if r, err := SyncFile(context.Background(), f, v2, FileSender{Actor: "file:r1"}); err != nil || r.Outcome != FileApplied {
		t.Fatalf("sync: %+v %v", r, err)
	}
	if got := f.State().Admission; got.MaxEngineLoad != 24 || !got.ReadOnly {
		t.Fatalf("after the sync %+v", got)
	}
	v3 := parse(t, stringsReplace(fileV1, "generation = 1", "generation = 3"))
	if r, err := SyncFile(context.Background(), f, v3, FileSender{Actor: "file:r1"}); err != nil || r.Outcome != FileApplied {
		t.Fatalf("sync without [admission]: %+v %v", r, err)
	}
	if f.State().Admission.ReadOnly {
		t.Fatal("the section stayed file-owned after the file dropped it")
	}
	if res := setAdmission(f, testSuperadmin, config.DefaultAdmission()); res.GetCode() != raftstore.Code_CODE_OK {
		t.Fatalf("API change after the file let go: %v", res)
	}
}

// A key's max band is a replicated key setting the API can change.
func TestKeyPriorityIsReplicated(t *testing.T) {
	f := seeded(t, fileV1)
	sum := "00000000000000000000000000000000000000000000000000000000000000aa"
	res := f.apply(&raftstore.Command{Op: raftstore.Op_OP_CREATE_KEY, ActorTokenSha256: HashToken(testSuperadmin),
		Payload: &raftstore.Command_Key{Key: keyToPB(APIKey{Name: "batch", SHA256: sum, MaxPriority: "sheddable"})}})
	if res.GetCode() != raftstore.Code_CODE_OK {
		t.Fatal(res)
	}
	set := func(name, band string) *raftstore.Result {
		return f.apply(&raftstore.Command{Op: raftstore.Op_OP_SET_KEY_PRIORITY, ActorTokenSha256: HashToken(testSuperadmin),
			Payload: &raftstore.Command_KeyPriority{KeyPriority: &raftstore.KeyPriority{Name: name, MaxPriority: band, FairnessHeader: true}}})
	}
	if res := set("batch", "urgent"); res.GetCode() != raftstore.Code_CODE_INVALID {
		t.Fatalf("unknown band: %v", res)
	}
	if res := set("ci", "critical"); res.GetCode() != raftstore.Code_CODE_READONLY {
		t.Fatalf("file-owned key: %v, want readonly", res)
	}
	if res := set("batch", "critical"); res.GetCode() != raftstore.Code_CODE_OK {
		t.Fatal(res)
	}
	for _, k := range f.State().Config(nil).Keys {
		if k.Name == "batch" && (k.MaxPriority != "critical" || !k.FairnessHeader) {
			t.Fatalf("data-plane key %+v", k)
		}
	}
	if got := stateFromSnapshot(f.State().toSnapshot()).Keys["batch"]; got.MaxPriority != "critical" {
		t.Fatalf("after a snapshot %+v", got)
	}
}

func stringsReplace(s string, oldnew ...string) string {
	return strings.NewReplacer(oldnew...).Replace(s)
}
