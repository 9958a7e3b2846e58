package sidecar

import (
	"encoding/base64"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// FuzzStreamApply feeds arbitrary payloads and sequence jumps through the
// whole stream (sequence tracking, decoding, residency): nothing may panic,
// and the tracker's books must stay balanced.
func FuzzStreamApply(f *testing.F) {
	files, _ := filepath.Glob(filepath.Join("kvevents", "testdata", "vectors", "*.jsonl"))
	for _, file := range files {
		raw, err := os.ReadFile(file)
		if err != nil {
			f.Fatal(err)
		}
		for _, line := range strings.Split(strings.TrimSpace(string(raw)), "\n") {
			var v struct {
				Frames []string `json:"frames_b64"`
			}
			if json.Unmarshal([]byte(line), &v) == nil && len(v.Frames) == 3 {
				p, _ := base64.StdEncoding.DecodeString(v.Frames[2])
				f.Add(p, uint8(1))
			}
		}
	}
	f.Fuzz(func(t *testing.T, payload []byte, jump uint8) {
		tr := NewTracker(16, 1)
		st := newStream(nil, NewMemSource(1, 4), "", tr, discardLog(), fixedNow, time.Second, &StreamStats{})
		seq := uint64(0)
		for i := 0; i < 3; i++ {
			st.handle(t.Context(), Message{Seq: seq, Payload: payload})
			seq += uint64(jump % 4)
		}
		s := tr.Stats()
		if s.ResidentKeys > s.EngineBlocks {
			t.Fatalf("more keys than blocks: %+v", s)
		}
		tr.Flush(8)
		if _, snap := tr.Snapshot(0); len(snap.Keys) != s.ResidentKeys {
			t.Fatalf("snapshot has %d keys, stats %d", len(snap.Keys), s.ResidentKeys)
		}
	})
}
