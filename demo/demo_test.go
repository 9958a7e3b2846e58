package demo

import (
	"bytes"
	"errors"
	"net"
	"os"
	"testing"
	"time"

	"github.com/rolter/rolter/localfleet"
)

func TestRunRefusesBeforeStartingAnything(t *testing.T) {
	ok := Options{Bin: os.Args[0], SimSpeed: 10, ReplaySpeed: 0.2, ReadyTimeout: time.Second}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	busy := ok
	busy.BasePort = ln.Addr().(*net.TCPAddr).Port // r1's API port is taken
	tests := []struct {
		name string
		o    Options
		want error
	}{
		{"no speed", func() Options { o := ok; o.SimSpeed = 0; return o }(), ErrOptions},
		{"no replay speed", func() Options { o := ok; o.ReplaySpeed = -1; return o }(), ErrOptions},
		{"no binary", func() Options { o := ok; o.Bin = ""; return o }(), ErrOptions},
		{"ports beyond 65535", func() Options { o := ok; o.BasePort = 65500; return o }(), localfleet.ErrPortRange},
		{"busy port", busy, localfleet.ErrPortBusy},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var out, errOut bytes.Buffer
			err := Run(t.Context(), tc.o, &out, &errOut)
			if !errors.Is(err, tc.want) {
				t.Fatalf("Run = %v, want %v", err, tc.want)
			}
			if out.Len() != 0 {
				t.Fatalf("Run printed (so started something): %s", out.String())
			}
		})
	}
}
