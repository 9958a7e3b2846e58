package cluster

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/rolter/rolter/cluster/raftstore"
	"github.com/rolter/rolter/config"
)

// StateApplier is what a file sync needs of a store (a *Store, or the
// admin API's view of one).
type StateApplier interface {
	State() *State
	Apply(ctx context.Context, cmd *raftstore.Command) (*raftstore.Result, error)
}

// Outcomes of a file sync.
const (
	FileApplied   = "applied"
	FileUnchanged = "unchanged"
	FileRefused   = "refused"
)

// FileSyncResult is what SyncFile did.
type FileSyncResult struct {
	FilePlan
	// Outcome is FileApplied, FileUnchanged or FileRefused.
	Outcome string `json:"outcome"`
	// Message explains a refusal.
	Message string `json:"message,omitempty"`
	// ConfigVersion is the config_version after the sync.
	ConfigVersion uint64 `json:"config_version"`
}

// FileSender says who sends a sync: a router's own file (Origin, e.g.
// "file:r1", no token) or an admin token (TokenSHA256 and Actor).
type FileSender struct {
	Origin      string
	Actor       string
	TokenSHA256 string
}

// maxSyncAttempts bounds how often SyncFile recomputes the difference
// when the state moved under it.
const maxSyncAttempts = 5

// SyncFile brings the file-owned entries of sa to what c declares, as one
// FileSync command, and returns what happened. A refusal by the
// generation rule (or by the FSM: an admin-API entry would lose a
// provider it needs) returns Outcome FileRefused and an error wrapping
// ErrFileRefused; a store failure (ErrNoLeader) returns that error.
func SyncFile(ctx context.Context, sa StateApplier, c *config.Config, from FileSender) (FileSyncResult, error) {
	var last string
	for range maxSyncAttempts {
		st := sa.State()
		r := FileSyncResult{FilePlan: PlanFileSync(st, c), ConfigVersion: st.ConfigVersion}
		switch {
		case r.Err != nil:
			r.Outcome, r.Message = FileRefused, r.Err.Error()
			return r, r.Err
		case r.Sync == nil:
			r.Outcome = FileUnchanged
			return r, nil
		}
		r.Sync.Origin = from.Origin
		cmd := &raftstore.Command{Op: raftstore.Op_OP_FILE_SYNC, Actor: from.Actor, ActorTokenSha256: from.TokenSHA256,
			Payload: &raftstore.Command_FileSync{FileSync: r.Sync}}
		res, err := sa.Apply(ctx, cmd)
		if err != nil {
			return r, err
		}
		r.ConfigVersion = res.GetConfigVersion()
		switch res.GetCode() {
		case raftstore.Code_CODE_OK:
			r.Outcome = FileApplied
			if res.GetUnchanged() {
				r.Outcome = FileUnchanged // another router sent the same file first
			}
			return r, nil
		case raftstore.Code_CODE_CONFLICT:
			// The state moved (another file or write landed first):
			// compute the difference again against the new state.
			last = res.GetMessage()
			continue
		default:
			r.Outcome, r.Message = FileRefused, res.GetMessage()
			return r, fmt.Errorf("%w: %s", ErrFileRefused, res.GetMessage())
		}
	}
	return FileSyncResult{Outcome: FileRefused, Message: last},
		fmt.Errorf("%w: the state kept moving (%d attempts): %s", ErrFileRefused, maxSyncAttempts, last)
}

// FileSyncer keeps one router's rolter.toml synced into its store: once
// the store is seeded, and again on every Kick (SIGHUP). It logs each
// outcome, counts them in rolter_config_file_sync_total{result} and
// exports rolter_config_file_out_of_sync.
type FileSyncer struct {
	store  *Store
	origin string
	log    *slog.Logger
	// retry paces retries after a store failure (no leader).
	retry time.Duration

	kick    chan struct{}
	results *prometheus.CounterVec

	mu   sync.Mutex
	file *config.Config
	rev  FileRevision
}

// NewFileSyncer returns a syncer of file into s, registering its metrics
// on reg (nil: none).
func NewFileSyncer(s *Store, file *config.Config, reg prometheus.Registerer, log *slog.Logger) (*FileSyncer, error) {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	f := &FileSyncer{store: s, origin: "file:" + s.NodeID(), log: log, retry: time.Second,
		kick: make(chan struct{}, 1), file: file, rev: FileRevisionOf(file),
		results: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "rolter_config_file_sync_total",
			Help: "Syncs of this router's rolter.toml into the replicated state, by result (applied, unchanged, refused, error).",
		}, []string{"result"})}
	for _, r := range []string{FileApplied, FileUnchanged, FileRefused, "error"} {
		f.results.WithLabelValues(r)
	}
	if reg != nil {
		stale := prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: "rolter_config_file_out_of_sync",
			Help: "1 when this router's rolter.toml revision differs from the one the cluster runs (an older or conflicting file).",
		}, f.outOfSync)
		for _, c := range []prometheus.Collector{f.results, stale} {
			if err := reg.Register(c); err != nil {
				return nil, err
			}
		}
	}
	return f, nil
}

func (f *FileSyncer) outOfSync() float64 {
	f.mu.Lock()
	rev := f.rev
	f.mu.Unlock()
	if have := f.store.State().File; have.SHA256 != "" && have != rev {
		return 1
	}
	return 0
}

// Kick replaces the file (a SIGHUP reload) and asks Run to sync it.
func (f *FileSyncer) Kick(file *config.Config) {
	f.mu.Lock()
	f.file, f.rev = file, FileRevisionOf(file)
	f.mu.Unlock()
	select {
	case f.kick <- struct{}{}:
	default:
	}
}

// Run syncs the file once the store is seeded and after every Kick, until
// ctx ends. Store failures are retried; a refusal waits for the next Kick.
func (f *FileSyncer) Run(ctx context.Context) {
	watch := f.store.Watch()
	for !f.store.State().Seeded {
		select {
		case <-ctx.Done():
			return
		case <-watch:
		case <-time.After(f.retry):
		}
	}
	for {
		f.mu.Lock()
		file := f.file
		f.mu.Unlock()
		err := f.syncOnce(ctx, file)
		var retry <-chan time.Time
		if err != nil && !errors.Is(err, ErrFileRefused) {
			retry = time.After(f.retry)
		}
		select {
		case <-ctx.Done():
			return
		case <-f.kick:
		case <-retry:
		}
	}
}

func (f *FileSyncer) syncOnce(ctx context.Context, file *config.Config) error {
	r, err := SyncFile(ctx, f.store, file, FileSender{Origin: f.origin})
	switch {
	case errors.Is(err, ErrFileRefused):
		f.results.WithLabelValues(FileRefused).Inc()
		f.log.Error("rolter.toml refused: the cluster keeps its configuration", "file", r.To.String(),
			"cluster", r.From.String(), "would_change", len(r.Changes), "reason", r.Message)
	case err != nil:
		f.results.WithLabelValues("error").Inc()
		f.log.Warn("rolter.toml sync failed; retrying", "err", err)
	case r.Outcome == FileApplied:
		f.results.WithLabelValues(FileApplied).Inc()
		f.log.Info("rolter.toml synced into the cluster", "revision", r.To.String(), "config_version", r.ConfigVersion,
			"changes", len(r.Changes))
		for _, c := range r.Changes {
			f.log.Info("rolter.toml change", "change", c)
		}
	default:
		f.results.WithLabelValues(FileUnchanged).Inc()
		f.log.Info("rolter.toml matches the cluster", "revision", r.To.String())
	}
	return err
}
