package cluster

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/rolter/rolter/cluster/raftstore"
	"github.com/rolter/rolter/config"
)

// Writes made on a follower travel to the leader; a refusal comes back as
// a code the caller matches with errors.Is, with the leader's message.
func TestFollowerWriteRefusalsArriveAsCodes(t *testing.T) {
	c := newCluster(t, 3)
	s := c.Node(follower(c))
	super := Author{Name: "ops", TokenSHA256: HashToken(testSuperadmin)}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()

	gpu := config.Provider{Name: "gpu", APIBase: "http://127.0.0.1:9/v1"}
	w, err := s.CreateProvider(ctx, super, gpu)
	if err != nil {
		t.Fatalf("create: %v", err)
	}
	if _, ok := s.State().Providers["gpu"]; !ok || w.ConfigVersion != s.State().ConfigVersion {
		t.Fatalf("after the write the follower shows provider %v at version %d, wrote %d",
			ok, s.State().ConfigVersion, w.ConfigVersion)
	}

	for _, tc := range []struct {
		name    string
		write   func() (Written, error)
		code    Code
		message string
	}{
		{"create twice", func() (Written, error) { return s.CreateProvider(ctx, super, gpu) }, ErrConflict, `provider "gpu" already exists`},
		{"delete missing", func() (Written, error) { return s.DeleteRoute(ctx, super, "nope") }, ErrNotFound, `no route "nope"`},
		{"file-owned", func() (Written, error) { return s.DeleteProvider(ctx, super, "vllm-a") }, ErrReadOnly, "managed by rolter.toml"},
		{"unknown token", func() (Written, error) {
			return s.CreateProvider(ctx, Author{TokenSHA256: HashToken("guess")}, config.Provider{Name: "x", APIBase: "http://127.0.0.1:9/v1"})
		}, ErrUnknownToken, "unknown admin token"},
		{"invalid", func() (Written, error) { return s.CreateKey(ctx, super, APIKey{Name: "k", SHA256: "short"}) }, ErrInvalid, "64-hex-digit"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := tc.write()
			var refused *RefusedError
			if !errors.Is(err, tc.code) || !errors.As(err, &refused) {
				t.Fatalf("err %v, want a refusal with code %s", err, tc.code)
			}
			if refused.Code != tc.code || !strings.Contains(refused.Message, tc.message) {
				t.Fatalf("refusal %s %q, want %s containing %q", refused.Code, refused.Message, tc.code, tc.message)
			}
			if errors.Is(err, ErrNoLeader) || errors.Is(err, ErrForward) {
				t.Fatalf("a refusal reads as a transport failure: %v", err)
			}
		})
	}
}

// A client's retry with the same idempotency key answers Replayed and
// applies nothing again.
func TestRetriedWriteIsReplayed(t *testing.T) {
	c := newCluster(t, 3)
	s := c.Node(follower(c))
	by := Author{Name: "ops", TokenSHA256: HashToken(testSuperadmin), IdempotencyKey: "client-1"}
	route := config.Route{Model: "llama-2", Strategy: "round_robin", Targets: []config.Target{{Provider: "vllm-a", Model: "llama", Weight: 1}}}
	first, err := s.CreateRoute(t.Context(), by, route)
	if err != nil || first.Replayed {
		t.Fatalf("first: %+v %v", first, err)
	}
	again, err := s.CreateRoute(t.Context(), by, route)
	if err != nil || !again.Replayed || again.ConfigVersion != first.ConfigVersion {
		t.Fatalf("retry: %+v %v, want replayed at version %d", again, err, first.ConfigVersion)
	}
}

// faultError reads the fault code only; the text is detail. An older
// router's reply (no fault field) still distinguishes not-leader.
func TestForwardFaultsAreMatchedByCode(t *testing.T) {
	for _, tc := range []struct {
		name string
		resp *raftstore.ForwardResponse
		want error
	}{
		{"ok", &raftstore.ForwardResponse{}, nil},
		{"unauthenticated", &raftstore.ForwardResponse{Fault: raftstore.Fault_FAULT_UNAUTHENTICATED, Error: "whatever"}, ErrUnauthenticated},
		{"not leader", &raftstore.ForwardResponse{Fault: raftstore.Fault_FAULT_NOT_LEADER}, ErrNoLeader},
		{"old router not leader", &raftstore.ForwardResponse{NotLeader: true}, ErrNoLeader},
		{"failed", &raftstore.ForwardResponse{Fault: raftstore.Fault_FAULT_FAILED, Error: "disk full"}, ErrForward},
		// The text of ErrUnauthenticated without the code is not taken for it.
		{"text only", &raftstore.ForwardResponse{Error: ErrUnauthenticated.Error()}, ErrForward},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := faultError(tc.resp, "r1")
			if tc.want == nil && err != nil || tc.want != nil && !errors.Is(err, tc.want) {
				t.Fatalf("faultError: %v, want %v", err, tc.want)
			}
			if tc.want != ErrUnauthenticated && errors.Is(err, ErrUnauthenticated) {
				t.Fatalf("faultError: %v reads as unauthenticated", err)
			}
		})
	}
}
