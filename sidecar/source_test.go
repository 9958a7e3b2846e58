package sidecar

import (
	"errors"
	"testing"
)

func TestParseFrames(t *testing.T) {
	seq := []byte{0, 0, 0, 0, 0, 0, 0, 42}
	m, err := ParseFrames([][]byte{[]byte("kv@1.2.3.4@m"), seq, {0x90}})
	if err != nil || m.Seq != 42 || m.Topic != "kv@1.2.3.4@m" || len(m.Payload) != 1 {
		t.Fatalf("%+v %v", m, err)
	}
	for name, frames := range map[string][][]byte{
		"two frames":       {seq, {0x90}},
		"short sequence":   {{}, {1, 2}, {0x90}},
		"four frames":      {{}, seq, {0x90}, {}},
		"no frames at all": nil,
	} {
		if _, err := ParseFrames(frames); !errors.Is(err, ErrFrames) {
			t.Errorf("%s: want ErrFrames, got %v", name, err)
		}
	}
}

func TestReplayFraming(t *testing.T) {
	req := ReplayRequest(7)
	if len(req) != 2 || len(req[0]) != 0 || len(req[1]) != 8 || req[1][7] != 7 {
		t.Fatalf("request frames %v", req)
	}
	end := []byte{0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff}
	tests := []struct {
		name    string
		frames  [][]byte
		wantSeq uint64
		wantErr bool
	}{
		{"with empty delimiter", [][]byte{{}, {0, 0, 0, 0, 0, 0, 0, 9}, {0x90}}, 9, false},
		{"delimiter already stripped", [][]byte{{0, 0, 0, 0, 0, 0, 0, 9}, {0x90}}, 9, false},
		{"end marker", [][]byte{{}, end, {}}, EndOfReplay, false},
		{"garbage", [][]byte{{1}}, 0, true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			m, err := ParseReplayFrames(tc.frames)
			if tc.wantErr {
				if !errors.Is(err, ErrFrames) {
					t.Fatalf("want ErrFrames, got %v", err)
				}
				return
			}
			if err != nil || m.Seq != tc.wantSeq {
				t.Fatalf("%+v %v", m, err)
			}
		})
	}
}
