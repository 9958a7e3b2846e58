package cluster

import (
	"bytes"
	"log/slog"
	"strings"
	"testing"
)

// Raft's log lines reach the router's log at their own level, once
// timestamped and once levelled: no hclog timestamp or [WARN] tag inside
// the message.
func TestRaftLogLinesKeepTheirLevel(t *testing.T) {
	var buf bytes.Buffer
	log := slog.New(slog.NewTextHandler(&buf, &slog.HandlerOptions{Level: slog.LevelDebug}))
	l := hclogger(log, "raft")
	l.Warn("heartbeat timeout reached, starting election", "last-leader-id", "r1")
	l.Error("failed to contact", "server-id", "r2")
	out := buf.String()
	for _, want := range []string{
		`level=WARN msg="raft: heartbeat timeout reached, starting election: last-leader-id=r1" component=raft`,
		`level=ERROR msg="raft: failed to contact: server-id=r2" component=raft`,
	} {
		if !strings.Contains(out, want) {
			t.Errorf("log without %s:\n%s", want, out)
		}
	}
	if strings.Contains(out, `msg="20`) || strings.Contains(out, "[WARN]") || strings.Contains(out, "[ERROR]") {
		t.Errorf("hclog's own timestamp or level left in the message:\n%s", out)
	}
}
