package mesh

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/rolter/rolter/internal/testwait"
)

// A router and a sidecar started on one host with the same default id:
// the second must fail loudly, naming both addresses and the flag, instead
// of being silently ignored by the pool.
func TestSecondNodeWithATakenNameFailsLoudly(t *testing.T) {
	trA, err := NewLoopbackTransport(11)
	if err != nil {
		t.Fatal(err)
	}
	router, err := StartRouter(t.Context(), Config{Name: "host-1", InsecureDev: true,
		Transport: trA, Timing: FastTiming}, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer router.Close()
	trB, err := NewLoopbackTransport(12)
	if err != nil {
		t.Fatal(err)
	}
	sidecar, err := StartSidecar(t.Context(), Config{Name: "host-1", Meta: Meta{EngineURL: "http://127.0.0.1:8000"},
		InsecureDev: true, Transport: trB, Timing: FastTiming}, []string{router.Addr()})
	if err == nil {
		sidecar.Close()
		t.Fatal("a second node named like a live member joined without an error")
	}
	if !errors.Is(err, ErrNameConflict) {
		t.Fatalf("err = %v, want ErrNameConflict", err)
	}
	for _, want := range []string{`"host-1"`, router.Addr(), "--node-id"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q does not name %s", err, want)
		}
	}
	// The member that was there first reports it too (log and metric).
	testwait.For(t, 5*time.Second, "the incumbent records the conflict", func() bool {
		return router.Conflict() != nil && router.Stats().NameConflicts.Load() > 0
	})
}
