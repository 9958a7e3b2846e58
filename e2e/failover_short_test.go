package e2e

import (
	"context"
	"net/http"
	"testing"
	"time"
)

// TestShortFirstTokenFailover is scenario 3, small: one engine of four
// answers 503, then hangs before its first token; every client sees one
// clean answer from another. (The stream that broke after its first byte
// in about one run in three was the test's tap closing its connection to a
// healthy engine: TestTapKeepsTheEngineConnectionWhileItAnswers.)
func TestShortFirstTokenFailover(t *testing.T) {
	engines := simFleet(t, 4, 1, true)
	r := standalone(t, FleetTOML(engines, "[timeouts]\nfirst_byte = \"1s\"\n"))
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("router log:\n%s", r.Proc.Tail(6000))
			for _, e := range engines {
				t.Logf("%s log:\n%s", e.Name, e.Proc.Tail(3000))
			}
		}
	})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	victim := engines[0]
	t.Run("503 before the first byte", func(t *testing.T) {
		victim.Tap.SetDown(true)
		defer victim.Tap.SetDown(false)
		res := FirstTokenFailover(ctx, r.API, victim.Tap, 8, 8)
		assertFailover(t, res)
	})
	t.Run("hang before the first token", func(t *testing.T) {
		code, b, err := Do(ctx, http.MethodPost, victim.URL+"/sim/faults", "", `{"hang_rate":1}`)
		if err != nil || code != http.StatusOK {
			t.Fatalf("setting faults: %d %s %v", code, b, err)
		}
		res := FirstTokenFailover(ctx, r.API, victim.Tap, 6, 8)
		assertFailover(t, res)
	})
}

func assertFailover(t *testing.T, res FailoverResult) {
	t.Helper()
	t.Logf("%d of %d answers clean; the failing engine saw %d attempts", res.Clean, res.Requests, res.VictimAttempts)
	if res.VictimAttempts == 0 {
		t.Error("the failing engine was never tried: the scenario proved nothing")
	}
	if res.Clean != res.Requests {
		t.Errorf("unclean answers: %v", res.Problems)
	}
}
