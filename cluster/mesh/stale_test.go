package mesh

import (
	"log/slog"
	"sync/atomic"
	"testing"
	"time"
)

// TestStaleFreesDivergedIndex: a view whose digest check failed (keys kept
// while a full state is awaited) must still free its index when the engine
// goes STALE; a hostile or broken sidecar that diverges and falls silent
// would otherwise pin its blocks in the router until memberlist declares it
// dead, and forever if it stays a member.
func TestStaleFreesDivergedIndex(t *testing.T) {
	var clock atomic.Int64
	clock.Store(time.Unix(1000, 0).UnixNano())
	n := &core{cfg: Config{Name: "router"}, log: slog.New(slog.DiscardHandler), members: map[string]member{},
		now: func() time.Time { return time.Unix(0, clock.Load()) }}
	v := newView(n, RouterConfig{StaleAfter: time.Second})
	const url = "http://127.0.0.1:1"
	v.memberUp("liar", Meta{Role: RoleSidecar, EngineURL: url})
	keys := []uint64{1, 2, 3, 4, 5}
	msg := encodeResidency(msgResidencyFull, &residencyMsg{From: "liar", Epoch: 1, Seq: 1, Added: keys,
		Count: uint64(len(keys)), Digest: 0xbad})
	if err := v.handle(msg[0], msg[1:]); err != nil {
		t.Fatal(err)
	}
	if n.stats.Divergences.Load() != 1 {
		t.Fatalf("divergences = %d, want 1 (the digest is wrong)", n.stats.Divergences.Load())
	}
	tg := v.Targets([]string{url})
	if got, _ := tg.Blocks(0); got != len(keys) {
		t.Fatalf("view holds %d blocks before going stale, want %d", got, len(keys))
	}
	clock.Add(int64(2 * time.Second))
	v.sweep()
	if st := tg.State(0); st != StateStale {
		t.Fatalf("state %v, want STALE", st)
	}
	if got, _ := tg.Blocks(0); got != 0 || v.total.Load() != 0 {
		t.Errorf("STALE engine still holds %d blocks (total %d)", got, v.total.Load())
	}
}
