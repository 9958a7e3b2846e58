//go:build unix && !linux

package sysmontick

import "time"

// setSlack does nothing where the system has no per-thread timer slack.
func setSlack(time.Duration) error { return nil }
