package tokenizer

import (
	"slices"
	"strings"
	"testing"
)

func TestPrefixStable(t *testing.T) {
	tests := []string{
		"You are a helpful assistant. Answer briefly, please!\nQ: what is 2+2?",
		Render([]Message{{"system", "be terse"}, {"user", "hello there, friend"}}),
		"averyveryverylongwordthatsplits into pieces",
	}
	for _, text := range tests {
		t.Run(text[:10], func(t *testing.T) {
			full := Encode(nil, text)
			if !slices.Equal(full, Encode(nil, text)) {
				t.Fatal("not deterministic")
			}
			for cut := 1; cut < len(text); cut++ {
				if strings.LastIndex(text[:cut], "<|") > strings.LastIndex(text[:cut], "|>") {
					continue // inside a special token
				}
				pre := Encode(nil, text[:cut])
				// All but the last piece of the prefix are stable.
				if len(pre) > 1 && !slices.Equal(pre[:len(pre)-1], full[:len(pre)-1]) {
					t.Fatalf("cut %d: prefix tokens diverge", cut)
				}
			}
		})
	}
}

func TestWordsAreSingleTokens(t *testing.T) {
	if n := Count(Text(7, 500)); n != 500 {
		t.Fatalf("Text(500) has %d tokens", n)
	}
	var b strings.Builder
	for i := 0; i < 512; i++ {
		b.WriteString(SyntheticWord(3, i))
	}
	if n := Count(b.String()); n != 512 {
		t.Fatalf("512 synthetic words give %d tokens", n)
	}
	if SyntheticWord(1, 0) == SyntheticWord(2, 0) && SyntheticWord(1, 1) == SyntheticWord(2, 1) {
		t.Fatal("blocks share words")
	}
}

func TestChatTemplateSpecialTokens(t *testing.T) {
	got := Encode(nil, Render([]Message{{"user", "hi"}}))
	if got[0] != 128000 || got[1] != 128006 || got[len(got)-3] != 128007 {
		t.Fatalf("template tokens %v", got)
	}
}
