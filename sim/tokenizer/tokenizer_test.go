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

func TestContinuedMessageExtendsTheAnswersTokens(t *testing.T) {
	msgs := []Message{{"user", "hi"}}
	prompt := Encode(nil, Render(msgs))
	partial := Text(9, 5)
	cont := Encode(nil, RenderWith(append(msgs, Message{"assistant", partial}), Template{ContinueFinal: true}))
	want := append(append([]uint32(nil), prompt...), Encode(nil, partial)...)
	if len(cont) != len(want) {
		t.Fatalf("continued prompt has %d tokens, want prompt %d + partial %d", len(cont), len(prompt), len(want)-len(prompt))
	}
	for i := range want {
		if cont[i] != want[i] {
			t.Fatalf("token %d: %d, want %d", i, cont[i], want[i])
		}
	}
	if got := RenderWith(msgs, Template{}); strings.HasSuffix(got, "assistant<|end_header_id|>\n\n") {
		t.Errorf("no generation prompt asked, got %q", got)
	}
}
