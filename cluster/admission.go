package cluster

import (
	"context"
	"time"

	"github.com/rolter/rolter/cluster/raftstore"
	"github.com/rolter/rolter/config"
	"google.golang.org/protobuf/proto"
)

// The replicated [admission] section and the keys' admission settings.
// The section is one value: the seed takes it from rolter.toml, the admin
// API (superadmin, OP_SET_ADMISSION) replaces it whole, and a file that
// declares [admission] owns it (read-only in the API) through its file
// syncs, like the entries it declares.

// admissionToPB converts the section to its wire form.
func admissionToPB(a config.Admission) *raftstore.Admission {
	band := func(b config.AdmissionBand) *raftstore.AdmissionBand {
		return &raftstore.AdmissionBand{MaxQueue: int64(b.MaxQueue), TtlNanos: int64(b.TTL.Duration), Fill: b.Fill}
	}
	return &raftstore.Admission{Enabled: a.Enabled, MaxEngineLoad: a.MaxEngineLoad, MaxWaiting: a.MaxWaiting,
		MaxKvUsage: a.MaxKVUsage, MaxQueuedPrefillTokens: a.MaxQueuedPrefillTokens,
		PromoteAfterNanos: int64(a.PromoteAfter.Duration), PromoteEvery: int64(a.PromoteEvery),
		QuantumTokens: int64(a.QuantumTokens), RetryAfterNanos: int64(a.RetryAfter.Duration),
		Critical: band(a.Critical), Standard: band(a.Standard), Sheddable: band(a.Sheddable), Readonly: a.ReadOnly}
}

func admissionFromPB(p *raftstore.Admission) config.Admission {
	d := func(n int64) config.Duration { return config.Duration{Duration: time.Duration(n)} }
	band := func(b *raftstore.AdmissionBand) config.AdmissionBand {
		return config.AdmissionBand{MaxQueue: int(b.GetMaxQueue()), TTL: d(b.GetTtlNanos()), Fill: b.GetFill()}
	}
	return config.Admission{Enabled: p.GetEnabled(), MaxEngineLoad: p.GetMaxEngineLoad(), MaxWaiting: p.GetMaxWaiting(),
		MaxKVUsage: p.GetMaxKvUsage(), MaxQueuedPrefillTokens: p.GetMaxQueuedPrefillTokens(),
		PromoteAfter: d(p.GetPromoteAfterNanos()), PromoteEvery: int(p.GetPromoteEvery()),
		QuantumTokens: int(p.GetQuantumTokens()), RetryAfter: d(p.GetRetryAfterNanos()),
		Critical: band(p.GetCritical()), Standard: band(p.GetStandard()), Sheddable: band(p.GetSheddable()),
		ReadOnly: p.GetReadonly()}
}

// checkAdmission validates a section as the config loader does.
func checkAdmission(a config.Admission) *raftstore.Result {
	var msg string
	a.Check(func(field, m string) {
		if msg == "" {
			msg = "admission." + field + ": " + m
		}
	})
	if msg != "" {
		return fail(raftstore.Code_CODE_INVALID, "%s", msg)
	}
	return nil
}

// setAdmission is OP_SET_ADMISSION: the whole section, unless rolter.toml
// owns it.
func (s *State) setAdmission(pb *raftstore.Admission) *raftstore.Result {
	if s.Admission.ReadOnly {
		return fail(raftstore.Code_CODE_READONLY, "[admission] is managed by rolter.toml and read-only in the admin API: "+
			"change it in rolter.toml and raise its generation")
	}
	a := admissionFromPB(pb)
	a.ReadOnly = false
	if res := checkAdmission(a); res != nil {
		return res
	}
	s.Admission = a
	return nil
}

// setKeyPriority is OP_SET_KEY_PRIORITY: a key's max band and whether it
// may name its fairness flow.
func (s *State) setKeyPriority(kp *raftstore.KeyPriority) *raftstore.Result {
	k, ok := s.Keys[kp.GetName()]
	if res := existsWritable("key", kp.GetName(), ok, k.ReadOnly); res != nil {
		return res
	}
	if !config.ValidPriority(kp.GetMaxPriority()) {
		return fail(raftstore.Code_CODE_INVALID, "max_priority: must be critical, standard or sheddable")
	}
	k.MaxPriority, k.FairnessHeader = kp.GetMaxPriority(), kp.GetFairnessHeader()
	s.Keys = cloneMap(s.Keys)
	s.Keys[k.Name] = k
	return nil
}

// declaredAdmission is the section c declares, read-only; ok is false
// when the file has no [admission].
func declaredAdmission(c *config.Config) (config.Admission, bool) {
	if c == nil || !c.Admission.ReadOnly {
		return config.Admission{}, false
	}
	return c.Admission, true
}

// planAdmission adds to fs what syncing c changes in the section, and its
// diff line.
func planAdmission(fs *raftstore.FileSync, st *State, c *config.Config) []string {
	want, declared := declaredAdmission(c)
	switch {
	case declared && !proto.Equal(admissionToPB(want), admissionToPB(st.Admission)):
		if fs != nil {
			fs.Admission = admissionToPB(want)
		}
		return []string{"~ admission (set by rolter.toml)"}
	case !declared && st.Admission.ReadOnly:
		if fs != nil {
			fs.ReleaseAdmission = true
		}
		return []string{"~ admission managed_by: file → api"}
	}
	return nil
}

// applyFileAdmission applies the section part of a FileSync to n.
func applyFileAdmission(n *State, fs *raftstore.FileSync) (*raftstore.Result, []string) {
	switch {
	case fs.GetAdmission() != nil:
		a := admissionFromPB(fs.GetAdmission())
		a.ReadOnly = true
		if res := checkAdmission(a); res != nil {
			return res, nil
		}
		n.Admission = a
		return nil, []string{"~ admission (set by rolter.toml)"}
	case fs.GetReleaseAdmission():
		n.Admission.ReadOnly = false
		return nil, []string{"~ admission managed_by: file → api"}
	}
	return nil, nil
}

// admissionRevision folds the declared section into the file's revision
// hash (only when the file declares it, so files without [admission] keep
// their revision).
func admissionRevision(msg *raftstore.FileSync, c *config.Config) {
	if a, ok := declaredAdmission(c); ok {
		msg.Admission = admissionToPB(a)
	}
}

// SetAdmission replaces the [admission] section (superadmin only;
// refused while rolter.toml owns it).
func (s *Store) SetAdmission(ctx context.Context, by Author, a config.Admission) (Written, error) {
	return s.write(ctx, by, &raftstore.Command{Op: raftstore.Op_OP_SET_ADMISSION,
		Payload: &raftstore.Command_Admission{Admission: admissionToPB(a)}})
}

// SetKeyPriority sets key name's max band and whether it may name its
// fairness flow.
func (s *Store) SetKeyPriority(ctx context.Context, by Author, name, maxPriority string, fairnessHeader bool) (Written, error) {
	return s.write(ctx, by, &raftstore.Command{Op: raftstore.Op_OP_SET_KEY_PRIORITY, Payload: &raftstore.Command_KeyPriority{
		KeyPriority: &raftstore.KeyPriority{Name: name, MaxPriority: maxPriority, FairnessHeader: fairnessHeader}}})
}
