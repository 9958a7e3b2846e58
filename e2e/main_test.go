package e2e

import (
	"os"
	"testing"
)

// TestMain removes the binaries SharedRolter built once the tests ran.
func TestMain(m *testing.M) {
	code := m.Run()
	if shared.dir != "" {
		os.RemoveAll(shared.dir)
	}
	os.Exit(code)
}
