package sidecar

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/rolter/rolter/adminapi"
	"github.com/rolter/rolter/cluster/mesh"
	"github.com/rolter/rolter/internal/testwait"
)

// startPool runs an in-process pool of one router and one sidecar on
// loopback.
func startPool(t *testing.T) *mesh.Harness {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	h, err := mesh.NewHarness(ctx, mesh.HarnessConfig{Routers: 1, Sidecars: 1, Seed: 7})
	if err != nil {
		cancel()
		t.Fatal(err)
	}
	t.Cleanup(func() { h.Close(); cancel() })
	testwait.For(t, 10*time.Second, "gossip", func() error {
		for _, n := range h.Members() {
			if n.NumMembers() != 2 {
				return fmt.Errorf("%s sees %d members", n.Name(), n.NumMembers())
			}
		}
		return nil
	})
	return h
}

// TestMeshPublisherStates: what a sidecar process hands the gossip reaches a
// router with the right state — never EXACT before the event stream says
// so, EXACT with the stream's keys once it does.
func TestMeshPublisherStates(t *testing.T) {
	h := startPool(t)
	pub := &meshPublisher{pub: h.Sidecars[0].Publisher()}
	pub.pub.Apply(mesh.ResidencyDelta{State: mesh.StateDegraded}) // as Open does at start
	tg := h.Routers[0].View().Targets([]string{mesh.EngineURL(0)})
	keys := []uint64{11, 22, 33}
	state := func(want mesh.ResidencyState) func() error {
		return func() error {
			if got := tg.State(0); got != want {
				return fmt.Errorf("state %v, want %v", got, want)
			}
			return nil
		}
	}
	pub.PublishStatus(EngineStatus{State: mesh.StateUnknown, MetricsOK: true, Running: 2, Waiting: 3,
		PrefixHits: 30, PrefixQueries: 120})
	testwait.For(t, 10*time.Second, "gossip", state(mesh.StateDegraded))
	if n, ok := tg.ResidentPrefix(0, keys); ok || n != 0 {
		t.Fatalf("no stream yet: ResidentPrefix = %d, %v; want neutral", n, ok)
	}
	testwait.For(t, 10*time.Second, "gossip", func() error {
		if q, ok := h.Routers[0].View().Load(mesh.EngineURL(0)); !ok || q != 5 {
			return fmt.Errorf("load %d %v, want 5 (running + waiting)", q, ok)
		}
		return nil
	})

	inv := adminapi.MeshEngines{Mesh: h.Routers[0]}
	testwait.For(t, 10*time.Second, "engine in the admin inventory", func() error {
		es := inv.Engines()
		if len(es) != 1 || es[0].Running != 2 || es[0].Waiting != 3 || es[0].PrefixCacheHitRate == nil ||
			*es[0].PrefixCacheHitRate != 0.25 || es[0].State != "DEGRADED" || es[0].KVEvents {
			return fmt.Errorf("engines %+v", es)
		}
		return nil
	})
	pub.PublishResidency(Delta{Added: keys, State: mesh.StateExact})
	testwait.For(t, 10*time.Second, "gossip", state(mesh.StateExact))
	testwait.For(t, 10*time.Second, "gossip", func() error {
		if n, ok := tg.ResidentPrefix(0, keys); !ok || n != 3 {
			return fmt.Errorf("ResidentPrefix = %d, %v; want 3, true", n, ok)
		}
		return nil
	})
	// A status composed before the stream started must not undo it.
	pub.PublishStatus(EngineStatus{State: mesh.StateUnknown})
	pub.PublishSnapshot(Snapshot{Keys: keys[:1], State: mesh.StateDegraded})
	testwait.For(t, 10*time.Second, "gossip", state(mesh.StateDegraded))
	pub.PublishSnapshot(Snapshot{Keys: keys[:1], State: mesh.StateExact})
	testwait.For(t, 10*time.Second, "gossip", func() error {
		if n, ok := tg.ResidentPrefix(0, keys); !ok || n != 1 {
			return fmt.Errorf("after the snapshot ResidentPrefix = %d, %v; want 1, true", n, ok)
		}
		return nil
	})
}
