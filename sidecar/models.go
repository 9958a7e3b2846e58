package sidecar

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/rolter/rolter/scrape"
)

// EngineModels is what the engine's /v1/models lists: base models, and the
// LoRA adapters loaded on it (entries with a parent model).
type EngineModels struct {
	Models   []string
	Adapters []string
}

// maxModels bounds how many entries of /v1/models are kept.
const maxModels = 1024

// ParseModels reads an OpenAI-style /v1/models answer as vLLM serves it.
func ParseModels(body []byte) (EngineModels, error) {
	var v struct {
		Data []struct {
			ID     string `json:"id"`
			Parent string `json:"parent"`
		} `json:"data"`
	}
	if err := json.Unmarshal(body, &v); err != nil {
		return EngineModels{}, fmt.Errorf("%w: models: %w", scrape.ErrScrape, err)
	}
	var m EngineModels
	for _, d := range v.Data {
		if d.ID == "" || len(m.Models)+len(m.Adapters) >= maxModels {
			continue
		}
		if d.Parent != "" && d.Parent != d.ID {
			m.Adapters = append(m.Adapters, d.ID)
		} else {
			m.Models = append(m.Models, d.ID)
		}
	}
	slices.Sort(m.Models)
	slices.Sort(m.Adapters)
	return m, nil
}

// modelsLoop polls /v1/models every ModelsInterval.
func (s *Sidecar) modelsLoop(ctx context.Context) {
	url := strings.TrimRight(s.cfg.Engine, "/") + "/v1/models"
	every(ctx, s.cfg.ModelsInterval, func() {
		rctx, cancel := context.WithTimeout(ctx, s.cfg.ScrapeTimeout)
		defer cancel()
		body, _, err := scrape.Fetch(rctx, s.opts.Client, url)
		var m EngineModels
		if err == nil {
			m, err = ParseModels(body)
		}
		if err != nil {
			if ctx.Err() == nil {
				s.tel.modelsFailures.Add(1)
				if p := s.tel.models.Load(); p == nil || p.lastOK {
					s.log.Warn("engine models poll failed", "url", url, "err", err)
				}
				prev := s.tel.models.Load()
				next := &polled[EngineModels]{}
				if prev != nil {
					next.v, next.at = prev.v, prev.at
				}
				s.tel.models.Store(next)
			}
			return
		}
		s.tel.models.Store(&polled[EngineModels]{v: m, at: s.now(), lastOK: true})
	})
}

// modelsFresh is how long a /v1/models answer is trusted.
func (s *Sidecar) modelsFresh() time.Duration { return 3 * s.cfg.ModelsInterval }
