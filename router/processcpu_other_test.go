//go:build !unix

package router

import "time"

// processCPU has no reading here: getrusage is Unix's.
func processCPU() (time.Duration, bool) { return 0, false }
