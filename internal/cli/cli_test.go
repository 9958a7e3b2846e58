package cli

import (
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/rolter/rolter/strategies"
)

// TestLists: the list flags take what users type (spaces after commas
// included) and refuse what no run could use, saying which element.
func TestLists(t *testing.T) {
	if got, err := Counts("1, 3,8"); err != nil || !slices.Equal(got, []int{1, 3, 8}) {
		t.Fatalf("Counts = %v, %v", got, err)
	}
	for _, bad := range []string{"0", "1,x", "", "-2"} {
		if _, err := Counts(bad); err == nil {
			t.Errorf("Counts(%q) accepted", bad)
		}
	}
	if _, err := Counts("1,x"); err == nil || err.Error() != `bad count "x"` {
		t.Errorf("Counts error %v", err)
	}
	if got, err := Values("0.3, 0.85"); err != nil || !slices.Equal(got, []float64{0.3, 0.85}) {
		t.Fatalf("Values = %v, %v", got, err)
	}
	if _, err := Values("0.5,0"); err == nil || err.Error() != `bad value "0"` {
		t.Errorf("Values error %v", err)
	}
}

// TestStrategies: empty is every registered strategy; an unknown name is
// a usage error that lists the known ones.
func TestStrategies(t *testing.T) {
	all, err := Strategies("")
	if err != nil || !slices.Equal(all, strategies.Names()) {
		t.Fatalf("Strategies(\"\") = %v, %v", all, err)
	}
	two, err := Strategies("round_robin, precise_cache_aware")
	if err != nil || !slices.Equal(two, []string{"round_robin", "precise_cache_aware"}) {
		t.Fatalf("Strategies = %v, %v", two, err)
	}
	_, err = Strategies("round_robin,nope")
	if !errors.Is(err, ErrUsage) {
		t.Fatalf("unknown strategy: %v is not a usage error", err)
	}
	want := `usage: unknown strategy "nope" (known: ` + strings.Join(strategies.Names(), ", ") + ")"
	if err.Error() != want {
		t.Fatalf("message %q, want %q", err.Error(), want)
	}
}

// TestWriteJSON: the --json file holds the value, indented, and a path
// that cannot be written names the flag.
func TestWriteJSON(t *testing.T) {
	path := filepath.Join(t.TempDir(), "rows.json")
	rows := []map[string]int{{"a": 1}, {"b": 2}}
	if err := WriteJSON(path, rows); err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var back []map[string]int
	if err := json.Unmarshal(b, &back); err != nil || len(back) != 2 || back[1]["b"] != 2 {
		t.Fatalf("read back %v, %v from %s", back, err, b)
	}
	err = WriteJSON(filepath.Join(t.TempDir(), "missing", "rows.json"), rows)
	if err == nil || errors.Is(err, ErrUsage) || !strings.HasPrefix(err.Error(), "--json: ") {
		t.Fatalf("unwritable path: %v", err)
	}
}
