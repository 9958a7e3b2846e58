package router

import (
	"strings"
	"testing"
)

// Costs come from the model, not the provider (seed 000): cheapest prices
// each target by its upstream model's [[models]] catalog entry, falling
// back to the provider's own prices for a model the catalog omits.
func TestCheapestPricesTargetsByTheirModel(t *testing.T) {
	a, b := newEngine(t, okChat), newEngine(t, okChat)
	h := newHarness(t, `
[[providers]]
name = "a"
api_base = "`+a.URL+`"
price_in_per_mtok = 0.1
price_out_per_mtok = 0.1

[[providers]]
name = "b"
api_base = "`+b.URL+`"
price_in_per_mtok = 5
price_out_per_mtok = 5

[[models]]
model = "big-model"
price_in_per_mtok = 10
price_out_per_mtok = 30

[[models]]
model = "small-model"
price_in_per_mtok = 0.2
price_out_per_mtok = 0.6

[[routes]]
model = "m"
strategy = "cheapest"
targets = [{provider = "a", model = "big-model"}, {provider = "b", model = "small-model"}]

[[routes]]
model = "fallback"
strategy = "cheapest"
targets = [{provider = "b", model = "unlisted"}, {provider = "a", model = "unlisted"}]
`, nil)
	for range 6 {
		if code, _, body := h.chat("m"); code != 200 {
			t.Fatalf("%d %s", code, body)
		}
	}
	if a.hits.Load() != 0 || b.hits.Load() != 6 {
		t.Errorf("cheapest sent a=%d b=%d; want all 6 to b, whose model is the cheaper", a.hits.Load(), b.hits.Load())
	}
	for range 4 {
		h.chat("fallback")
	}
	if a.hits.Load() != 4 {
		t.Errorf("a model missing from the catalog is priced by its provider: a got %d of 4", a.hits.Load())
	}
}

// A provider group prices members by their declared upstream model; an
// all-passthrough group is cost-neutral, however its providers are priced.
func TestPassthroughGroupIsCostNeutral(t *testing.T) {
	a, b := newEngine(t, okChat), newEngine(t, okChat)
	h := newHarness(t, `
[[providers]]
name = "a"
api_base = "`+a.URL+`"
price_in_per_mtok = 0.1

[[providers]]
name = "b"
api_base = "`+b.URL+`"
price_in_per_mtok = 9

[[provider_groups]]
name = "Fleet"
slug = "fleet"
strategy = "cheapest"
members = [{provider = "a"}, {provider = "b"}]
`, nil)
	for range 40 {
		if code, _, body := h.chat("fleet/llama"); code != 200 {
			t.Fatalf("%d %s", code, body)
		}
	}
	if a.hits.Load() < 5 || b.hits.Load() < 5 {
		t.Errorf("passthrough group split a=%d b=%d; a cost-neutral group ties on cost and spreads", a.hits.Load(), b.hits.Load())
	}
	sn := h.srv.snap.Load()
	for _, tg := range sn.groups["fleet"].specs {
		if tg.CostInPerMtok != 0 || tg.CostOutPerMtok != 0 {
			t.Errorf("passthrough member %s priced %v/%v", tg.ID, tg.CostInPerMtok, tg.CostOutPerMtok)
		}
	}
	if !strings.HasSuffix(sn.groups["fleet"].specs[0].ID, "/*") {
		t.Errorf("member id %s", sn.groups["fleet"].specs[0].ID)
	}
}
