package adminapi

import (
	"net/http"

	"github.com/gorilla/mux"
	"github.com/rolter/rolter/config"
)

// The model price catalog: GET /api/v1/model-prices lists it,
// PUT /api/v1/model-prices/{model} sets one entry (create or replace) and
// DELETE removes it. Model names may contain slashes
// ("meta-llama/Llama-3.1-8B-Instruct"). Prices are validated as in
// rolter.toml (config.CheckPrices), replicated through Raft and reach
// every router's balancers with the next config_version. An entry
// rolter.toml's [[models]] declares is managed by the file: it reads
// "managed_by":"file" and PUT and DELETE answer 409 readonly, as for
// every other file-owned kind.

type modelPriceJSON struct {
	Model           string  `json:"model"`
	PriceInPerMtok  float64 `json:"price_in_per_mtok"`
	PriceOutPerMtok float64 `json:"price_out_per_mtok"`
	ReadOnly        bool    `json:"readonly"`
	ManagedBy       string  `json:"managed_by"`
}

func modelPriceOut(m config.ModelPrice) modelPriceJSON {
	return modelPriceJSON{m.Model, m.PriceInPerMtok, m.PriceOutPerMtok, m.ReadOnly, managedBy(m.ReadOnly)}
}

func (a *API) putModelPrice(w http.ResponseWriter, r *http.Request, p principal) {
	var in struct {
		Model           string   `json:"model"`
		PriceInPerMtok  *float64 `json:"price_in_per_mtok"`
		PriceOutPerMtok *float64 `json:"price_out_per_mtok"`
	}
	if !decode(w, r, &in) {
		return
	}
	name := mux.Vars(r)["name"]
	if in.Model != "" && in.Model != name {
		badRequest(w, "model: does not match the URL")
		return
	}
	if in.PriceInPerMtok == nil || in.PriceOutPerMtok == nil {
		badRequest(w, "price_in_per_mtok and price_out_per_mtok: both required")
		return
	}
	m := config.ModelPrice{Model: name, PriceInPerMtok: *in.PriceInPerMtok, PriceOutPerMtok: *in.PriceOutPerMtok}
	if f, err := config.CheckPrices(m.PriceInPerMtok, m.PriceOutPerMtok); err != nil {
		badRequest(w, f+": "+err.Error())
		return
	}
	_, err := a.d.Store.SetModelPrice(r.Context(), a.author(r, p), m)
	if a.written(w, "model price "+m.Model, err) {
		writeJSON(w, http.StatusOK, modelPriceOut(m))
	}
}
