package strategies

import (
	"strings"
	"testing"
)

// TokenPrompt writes each id as six base-64 digits, most significant
// first, bounded to MaxPromptBytes: two id prompts share a text prefix of
// 6k bytes exactly when they share their first k ids.
func TestTokenPrompt(t *testing.T) {
	ref := func(ids []uint32) string {
		var b strings.Builder
		for _, id := range ids[:min(len(ids), MaxPromptBytes/TokenKeyBytes)] {
			for shift := 30; shift >= 0; shift -= 6 {
				b.WriteByte(tokenDigits[id>>shift&63])
			}
		}
		return b.String()
	}
	ids := []uint32{0, 1, 63, 64, 4095, 4096, 128000, 1<<32 - 1, 1 << 31}
	for len(ids) < 6000 {
		ids = append(ids, uint32(len(ids))*2654435761)
	}
	for _, n := range []int{0, 1, 9, 5461, 5462, 6000} {
		got, want := TokenPrompt(ids[:n]), ref(ids[:n])
		if got != want {
			t.Fatalf("%d ids: %.40q, want %.40q", n, got, want)
		}
		if len(got) > MaxPromptBytes {
			t.Fatalf("%d ids: %d bytes, over the %d bound", n, len(got), MaxPromptBytes)
		}
	}
	a, b := TokenPrompt([]uint32{7, 8, 9}), TokenPrompt([]uint32{7, 8, 10})
	if a[:12] != b[:12] || a[12:] == b[12:] {
		t.Fatalf("%q and %q: want a shared 12-byte prefix and different tails", a, b)
	}
}
