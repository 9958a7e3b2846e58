package e2e

import (
	"testing"
	"time"
)

// TestShortLossyGossip is a short run of scenario 6 (the full 60 s window
// is in TestMeshFaults/06): 1 router and 2 sidecars in process, real
// memberlist LAN timings, 20% of every node's outbound packets dropped for
// 4 s. No engine may be declared dead and the summaries a router holds may
// not age past 2 s at the 99th percentile.
func TestShortLossyGossip(t *testing.T) {
	res, err := MeasureLossyMesh(t.Context(), 1, 2, 0.2, 4*time.Second, 61)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("%d samples, %d/%d packets dropped: age p50 %v p99 %v max %v; false deaths %d, member drops %d",
		res.Samples, res.PacketsDropped, res.PacketsDropped+res.Sent, res.AgeP50, res.AgeP99, res.AgeMax,
		res.FalseDeaths, res.MemberDrops)
	if res.PacketsDropped == 0 {
		t.Fatal("the lossy transport dropped nothing")
	}
	if res.FalseDeaths > 0 || res.MemberDrops > 0 {
		t.Errorf("live engines declared dead in %d samples, members dropped in %d", res.FalseDeaths, res.MemberDrops)
	}
	if res.AgeP99 > 2*time.Second {
		t.Errorf("summary age p99 %v > 2s", res.AgeP99)
	}
}
