//go:build !linux

package overhead

import "time"

// pacer is the open loop's clock; off Linux, time.Sleep.
type pacer struct{}

func newPacer() *pacer { return nil }

func (p *pacer) sleep(d time.Duration) { time.Sleep(d) }

func (p *pacer) close() {}
