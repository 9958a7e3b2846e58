package strategies

import (
	"slices"
	"strings"
	"testing"
)

func TestPrefixHashesAgreeWithWholePrefix(t *testing.T) {
	prompt := strings.Repeat("abcdefghij", 50)
	var cuts []int
	for _, ph := range AppendPrefixHashes(nil, "p", prompt) {
		cuts = append(cuts, ph.Cut)
		alone := AppendPrefixHashes(nil, "p", prompt[:ph.Cut])
		if last := alone[len(alone)-1]; last.Cut != ph.Cut || last.Hash != ph.Hash {
			t.Fatalf("cut %d: running hash %x, hash of the prefix alone %x", ph.Cut, ph.Hash, last.Hash)
		}
		if other := AppendPrefixHashes(nil, "q", prompt[:ph.Cut]); other[len(other)-1].Hash == ph.Hash {
			t.Fatalf("cut %d: same hash in another pool", ph.Cut)
		}
	}
	if !slices.Equal(cuts, []int{64, 128, 256, 500}) {
		t.Fatalf("cuts %v", cuts)
	}
	if SessionHash("p", "s1") == SessionHash("q", "s1") || SessionHash("p", "s1") == SessionHash("p", "s2") {
		t.Fatal("session keys must differ across pools and sessions")
	}
}
