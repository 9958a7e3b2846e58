package workload

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/rolter/rolter/sim/tokenizer"
)

// TraceBlock is the number of tokens one Mooncake hash id stands for.
const TraceBlock = 512

// TraceRecord is one line of a Mooncake trace.
type TraceRecord struct {
	Timestamp    int64    `json:"timestamp"` // ms from the trace start
	InputLength  int      `json:"input_length"`
	OutputLength int      `json:"output_length"`
	HashIDs      []uint64 `json:"hash_ids"`
}

// ErrTrace marks a malformed trace.
var ErrTrace = errors.New("workload: malformed trace")

// ReadTrace reads up to limit records (0: all) of a JSON-lines trace.
func ReadTrace(r io.Reader, limit int) ([]TraceRecord, error) {
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 1<<20), 16<<20)
	var out []TraceRecord
	line := 0
	for sc.Scan() && (limit <= 0 || len(out) < limit) {
		line++
		text := strings.TrimSpace(sc.Text())
		if text == "" {
			continue
		}
		var rec TraceRecord
		if err := json.Unmarshal([]byte(text), &rec); err != nil {
			return nil, fmt.Errorf("%w: line %d: %v", ErrTrace, line, err)
		}
		if rec.InputLength <= 0 || len(rec.HashIDs) == 0 {
			return nil, fmt.Errorf("%w: line %d: no input", ErrTrace, line)
		}
		out = append(out, rec)
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("workload: read trace: %w", err)
	}
	return out, nil
}

// BlockToken is token i of the 512-token block a hash id stands for: a
// fixed function of (hash id, i), so equal hash ids give equal blocks.
func BlockToken(hashID uint64, i int) uint32 {
	x := hashID*0x9E3779B97F4A7C15 + uint64(i) + 0x632BE59BD9B4E019
	x ^= x >> 30
	x *= 0xBF58476D1CE4E5B9
	x ^= x >> 27
	x *= 0x94D049BB133111EB
	x ^= x >> 31
	return 1000 + uint32(x%120000)
}

// blockPos returns the block (hash id) and position of prompt token i.
func (rec TraceRecord) blockPos(i int) (hash uint64, pos int) {
	b := i / TraceBlock
	if b >= len(rec.HashIDs) {
		// Longer than its hash ids: the overflow is private to the request.
		return rec.HashIDs[len(rec.HashIDs)-1] ^ uint64(rec.Timestamp)<<20 ^ uint64(b), i % TraceBlock
	}
	return rec.HashIDs[b], i % TraceBlock
}

// Tokens returns the record's prompt as token ids: its hash ids' blocks,
// cut to input_length.
func (rec TraceRecord) Tokens() []uint32 {
	out := make([]uint32, rec.InputLength)
	for i := range out {
		out[i] = BlockToken(rec.blockPos(i))
	}
	return out
}

// Text returns the record's prompt as text of exactly input_length
// one-token words, block by block, so records sharing hash ids share a
// text (and token) prefix.
func (rec TraceRecord) Text() string {
	var b strings.Builder
	b.Grow(rec.InputLength * 7)
	for i := 0; i < rec.InputLength; i++ {
		b.WriteString(tokenizer.SyntheticWord(rec.blockPos(i)))
	}
	return b.String()
}

// FromTrace turns records into requests at their timestamps (relative to
// the first record). The prompt is the token ids (completions); when chat
// is true it is also given as one user message of the same words.
func FromTrace(recs []TraceRecord, chat bool) []Request {
	out := make([]Request, 0, len(recs))
	var t0 int64
	if len(recs) > 0 {
		t0 = recs[0].Timestamp
	}
	for _, rec := range recs {
		r := Request{At: time.Duration(rec.Timestamp-t0) * time.Millisecond, MaxTokens: max(rec.OutputLength, 1)}
		if chat {
			r.Messages = []tokenizer.Message{{Role: "user", Content: rec.Text()}}
			r = fromMessages(r)
		} else {
			r.Tokens = rec.Tokens()
		}
		out = append(out, r)
	}
	return out
}
