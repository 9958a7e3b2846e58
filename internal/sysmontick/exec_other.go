//go:build !unix

package sysmontick

import "time"

func reexec(string, []string, []string, time.Duration) error { return ErrUnsupported }
