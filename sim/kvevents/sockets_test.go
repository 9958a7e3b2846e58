//go:build cgo

package kvevents

import (
	"context"
	"encoding/binary"
	"io"
	"log/slog"
	"testing"
	"time"

	"github.com/rolter/rolter/internal/zmqsock"
	"github.com/rolter/rolter/kvblock"
)

func TestSocketsLiveAndReplayOverZMQ(t *testing.T) {
	for _, format := range []Format{FormatArray, FormatMap} {
		t.Run(map[Format]string{FormatArray: "array", FormatMap: "map"}[format], func(t *testing.T) {
			p := NewPublisher(Options{Encoding: Encoding{Format: format}, Topic: "t", FirstSeq: 0}, nil)
			log := slog.New(slog.NewTextHandler(io.Discard, nil))
			s, err := Listen(context.Background(), p, "tcp://127.0.0.1:*", "tcp://127.0.0.1:*", DialAuto, log)
			if err != nil {
				t.Fatal(err)
			}
			defer s.Close()
			pubEP, replayEP := s.Endpoints()

			zctx, err := zmqsock.NewContext()
			if err != nil {
				t.Fatal(err)
			}
			defer zctx.Term()
			sub, err := zctx.Socket(zmqsock.Sub, zmqsock.Options{RecvTimeout: 50 * time.Millisecond})
			if err != nil {
				t.Fatal(err)
			}
			defer sub.Close()
			if err := sub.Connect(pubEP); err != nil {
				t.Fatal(err)
			}
			ev := []Event{{Kind: kvblock.BlockStored, Hashes: []Digest{digestOf(9)}, TokenIDs: make([]uint32, 16), BlockSize: 16}}
			// Publish until the subscriber has joined (slow joiner), bounded.
			var first [][]byte
			deadline := time.Now().Add(5 * time.Second)
			for first == nil && time.Now().Before(deadline) {
				if err := p.Publish(ev); err != nil {
					t.Fatal(err)
				}
				if m, err := sub.Recv(); err == nil {
					first = m
				}
			}
			if first == nil {
				t.Fatal("no message received")
			}
			if len(first) != 3 || string(first[0]) != "t" {
				t.Fatalf("frames %q", first)
			}
			b := generic(t, first[2])
			e0 := b[1].([]any)[0]
			if format == FormatMap && e0.(map[string]any)["type"] != "BlockStored" ||
				format == FormatArray && e0.([]any)[0] != "BlockStored" {
				t.Fatalf("event %v", e0)
			}
			// Subsequent live messages carry consecutive sequence numbers.
			seq := binary.BigEndian.Uint64(first[1])
			_ = p.Publish(ev)
			m, err := sub.Recv()
			if err != nil || binary.BigEndian.Uint64(m[1]) != seq+1 {
				t.Fatalf("next message %v err %v", m, err)
			}

			dealer, err := zctx.Socket(zmqsock.Dealer, zmqsock.Options{RecvTimeout: 5 * time.Second})
			if err != nil {
				t.Fatal(err)
			}
			defer dealer.Close()
			if err := dealer.Connect(replayEP); err != nil {
				t.Fatal(err)
			}
			if err := dealer.Send(nil, SeqFrame(0)); err != nil {
				t.Fatal(err)
			}
			var got []uint64
			for i := 0; i < 10000; i++ {
				r, err := dealer.Recv()
				if err != nil {
					t.Fatalf("replay receive: %v", err)
				}
				if len(r) != 3 || len(r[0]) != 0 {
					t.Fatalf("replay frames %q", r)
				}
				s := binary.BigEndian.Uint64(r[1])
				if s == EndMarkerSeq {
					if len(r[2]) != 0 {
						t.Fatal("end marker with payload")
					}
					break
				}
				generic(t, r[2])
				got = append(got, s)
			}
			if len(got) < 2 || got[0] != 0 || got[len(got)-1] != seq+1 {
				t.Fatalf("replayed %v", got)
			}
			for i := range got {
				if got[i] != uint64(i) {
					t.Fatalf("replay not consecutive: %v", got)
				}
			}
		})
	}
}
