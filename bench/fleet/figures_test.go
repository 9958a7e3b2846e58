package fleet

import (
	"strings"
	"testing"
)

func TestAgreementBounds(t *testing.T) {
	pred := Figures{HitRate: 0.10, TTFTP50: 1000, TTFTP90: 4000}
	tests := []struct {
		name  string
		meas  Figures
		agree bool
	}{
		{"equal", pred, true},
		{"hit 14% high, ttft 24% high", Figures{HitRate: 0.114, TTFTP50: 1240, TTFTP90: 4960}, true},
		{"hit 16% low", Figures{HitRate: 0.084, TTFTP50: 1000, TTFTP90: 4000}, false},
		{"p50 26% low", Figures{HitRate: 0.10, TTFTP50: 740, TTFTP90: 4000}, false},
		{"p90 30% high", Figures{HitRate: 0.10, TTFTP50: 1000, TTFTP90: 5200}, false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			r := Row{Strategy: "round_robin", Routers: 1, Measured: tc.meas, Predicted: pred}
			if got := r.Agrees(); got != tc.agree {
				hit, p50, p90 := r.Deviation()
				t.Fatalf("Agrees = %v (deviation hit %.3f p50 %.3f p90 %.3f), want %v", got, hit, p50, p90, tc.agree)
			}
			var b strings.Builder
			Print(&b, []Row{r})
			want := map[bool]string{true: "yes", false: "no"}[tc.agree]
			if lines := strings.Split(strings.TrimSpace(b.String()), "\n"); len(lines) != 2 || !strings.Contains(lines[1], " "+want+" ") {
				t.Fatalf("table does not say %q:\n%s", want, b.String())
			}
		})
	}
	if hit, _, _ := (Row{Measured: Figures{HitRate: 0.01}}).Deviation(); hit <= HitTolerance {
		t.Fatalf("a hit rate measured where none was predicted deviates by %v", hit)
	}
}
