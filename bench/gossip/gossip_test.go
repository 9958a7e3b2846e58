package gossip

import (
	"errors"
	"io"
	"testing"
	"time"
)

func TestRunRejectsUnusableConfigs(t *testing.T) {
	ok := Config{Sidecars: 1, Routers: 1, Blocks: 1, EventsPerSec: 2, Duration: time.Second}
	for name, mod := range map[string]func(*Config){
		"no sidecars":      func(c *Config) { c.Sidecars = 0 },
		"no routers":       func(c *Config) { c.Routers = 0 },
		"one event/s":      func(c *Config) { c.EventsPerSec = 1 },
		"no duration":      func(c *Config) { c.Duration = 0 },
		"loss above one":   func(c *Config) { c.Loss = 1.5 },
		"negative loss":    func(c *Config) { c.Loss = -0.1 },
		"no blocks at all": func(c *Config) { c.Blocks = 0 },
	} {
		c := ok
		mod(&c)
		if err := Run(t.Context(), c, io.Discard); !errors.Is(err, ErrConfig) {
			t.Errorf("%s: Run = %v, want ErrConfig", name, err)
		}
	}
}
