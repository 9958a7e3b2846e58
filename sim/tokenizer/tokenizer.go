// Package tokenizer owns the simulator's stand-in for a model tokenizer:
// a deterministic text → token-id mapping with the property prefix caching
// depends on (the same text always gives the same ids; texts sharing a
// prefix share the token prefix up to the last whole piece), a fixed
// Llama-3-style chat template, and the inverse direction the workload
// generators need (token-exact text for chosen pieces).
//
// Pieces: a run of up to 8 ASCII letters or digits, with the single space
// before it when there is one; any other byte alone; Llama-3 special
// tokens ("<|...|>") whole. A piece's id is a 64-bit FNV-1a hash of its
// bytes folded into the vocabulary; special tokens have Llama 3's ids.
package tokenizer

import (
	"strings"
)

// VocabSize is the stand-in vocabulary size (Llama 3's).
const VocabSize = 128256

// firstID is the smallest id an ordinary piece maps to.
const firstID = 256

// maxWord is the longest run of letters or digits in one piece.
const maxWord = 8

// Llama 3 special tokens used by the chat template.
var specials = map[string]uint32{
	"<|begin_of_text|>":   128000,
	"<|end_of_text|>":     128001,
	"<|start_header_id|>": 128006,
	"<|end_header_id|>":   128007,
	"<|eot_id|>":          128009,
}

func isWord(b byte) bool {
	return b >= 'a' && b <= 'z' || b >= 'A' && b <= 'Z' || b >= '0' && b <= '9'
}

// pieceID maps a piece to an id in [firstID, 128000).
func pieceID(p string) uint32 {
	h := uint64(14695981039346656037)
	for i := 0; i < len(p); i++ {
		h ^= uint64(p[i])
		h *= 1099511628211
	}
	return firstID + uint32(h%uint64(128000-firstID))
}

// Encode appends the token ids of text to dst.
func Encode(dst []uint32, text string) []uint32 {
	i := 0
	for i < len(text) {
		if text[i] == '<' && strings.HasPrefix(text[i:], "<|") {
			if end := strings.Index(text[i:], "|>"); end > 0 {
				if id, ok := specials[text[i:i+end+2]]; ok {
					dst = append(dst, id)
					i += end + 2
					continue
				}
			}
		}
		start := i
		if text[i] == ' ' && i+1 < len(text) && isWord(text[i+1]) {
			i++
		}
		if isWord(text[i]) {
			j := i
			for j < len(text) && j-i < maxWord && isWord(text[j]) {
				j++
			}
			dst = append(dst, pieceID(text[start:j]))
			i = j
			continue
		}
		dst = append(dst, pieceID(text[i:i+1]))
		i++
	}
	return dst
}

// Count returns the number of tokens of text.
func Count(text string) int { return len(Encode(nil, text)) }

// Message is one chat message.
type Message struct {
	Role    string
	Content string
}

// Render returns the chat template applied to msgs, ending with the
// assistant header that prompts the model's reply:
//
//	<|begin_of_text|>{for each: <|start_header_id|>ROLE<|end_header_id|>\n\nCONTENT<|eot_id|>}
//	<|start_header_id|>assistant<|end_header_id|>\n\n
func Render(msgs []Message) string {
	return RenderWith(msgs, Template{GenerationPrompt: true})
}

// Template holds the chat template switches of vLLM's chat API.
type Template struct {
	// GenerationPrompt ends the text with the assistant header
	// (add_generation_prompt).
	GenerationPrompt bool
	// ContinueFinal leaves the final message open, without its
	// <|eot_id|>, so the model continues it rather than answering it
	// (continue_final_message).
	ContinueFinal bool
}

// RenderWith is Render with the template's switches set by tpl.
func RenderWith(msgs []Message, tpl Template) string {
	var b strings.Builder
	b.WriteString("<|begin_of_text|>")
	for i, m := range msgs {
		b.WriteString("<|start_header_id|>")
		b.WriteString(m.Role)
		b.WriteString("<|end_header_id|>\n\n")
		b.WriteString(m.Content)
		if tpl.ContinueFinal && i == len(msgs)-1 {
			return b.String()
		}
		b.WriteString("<|eot_id|>")
	}
	if tpl.GenerationPrompt {
		b.WriteString("<|start_header_id|>assistant<|end_header_id|>\n\n")
	}
	return b.String()
}

// words is the vocabulary of generated text: every entry, with its leading
// space, is exactly one token.
var words = [...]string{
	"the", "of", "and", "to", "in", "is", "that", "for", "it", "as", "with", "was",
	"on", "be", "at", "by", "this", "had", "not", "are", "but", "from", "or", "have",
	"an", "they", "which", "one", "you", "were", "her", "all", "she", "there", "would",
	"their", "we", "him", "been", "has", "when", "who", "will", "more", "no", "if", "out",
	"so", "said", "what", "up", "its", "about", "into", "than", "them", "can", "only",
	"other", "new", "some", "could", "time", "these",
}

// Word returns the i-th word of a deterministic stream keyed by seed, with
// a leading space: one token.
func Word(seed uint64, i int) string {
	x := seed ^ uint64(i)*0x9E3779B97F4A7C15
	x ^= x >> 31
	x *= 0xBF58476D1CE4E5B9
	x ^= x >> 29
	return " " + words[x%uint64(len(words))]
}

// Text returns n one-token words keyed by seed: exactly n tokens.
func Text(seed uint64, n int) string {
	var b strings.Builder
	b.Grow(n * 6)
	for i := 0; i < n; i++ {
		b.WriteString(Word(seed, i))
	}
	return b.String()
}

// SyntheticWord returns a deterministic one-token word (letters only, at
// most 7, with a leading space) for position i of block id. Distinct
// blocks give distinct word streams, so their tokens differ.
func SyntheticWord(id uint64, i int) string {
	x := id*0xD6E8FEB86659FD93 + uint64(i)*0x9E3779B97F4A7C15 + 1
	x ^= x >> 32
	x *= 0xD6E8FEB86659FD93
	x ^= x >> 32
	n := 3 + int(x%5)
	var buf [8]byte
	buf[0] = ' '
	for k := 1; k <= n; k++ {
		x = x*6364136223846793005 + 1442695040888963407
		buf[k] = byte('a' + (x>>33)%26)
	}
	return string(buf[:n+1])
}
