package main

import (
	"os"
	"testing"
)

// execEnv makes the test binary behave as the rolter binary, so a test
// that starts rolter children (bench fleet's) needs no separate build.
const execEnv = "ROLTER_TEST_EXEC_AS_ROLTER"

func TestMain(m *testing.M) {
	if os.Getenv(execEnv) == "1" {
		main()
	}
	os.Exit(m.Run())
}
