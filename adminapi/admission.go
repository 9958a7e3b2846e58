package adminapi

import (
	"net/http"

	"github.com/gorilla/mux"

	"github.com/rolter/rolter/config"
)

// The [admission] section (GET/PUT /api/v1/admission, superadmin) and a
// key's admission settings (PUT /api/v1/keys/{name}/priority, admin).

// admissionJSON is the section as the API shows it.
type admissionJSON struct {
	config.Admission
	ManagedBy string `json:"managed_by"`
}

func (a *API) getAdmission(w http.ResponseWriter, _ *http.Request, _ principal) {
	ad := a.d.Store.State().Admission
	writeJSON(w, http.StatusOK, admissionJSON{Admission: ad, ManagedBy: managedBy(ad.ReadOnly)})
}

// putAdmission replaces the whole section: fields left out of the body
// take their defaults.
func (a *API) putAdmission(w http.ResponseWriter, r *http.Request, p principal) {
	in := config.DefaultAdmission()
	if !decode(w, r, &in) {
		return
	}
	var msg string
	in.Check(func(field, m string) {
		if msg == "" {
			msg = field + ": " + m
		}
	})
	if msg != "" {
		badRequest(w, msg)
		return
	}
	if _, err := a.d.Store.SetAdmission(r.Context(), a.author(r, p), in); a.written(w, "admission", err) {
		a.getAdmission(w, r, p)
	}
}

func (a *API) putKeyPriority(w http.ResponseWriter, r *http.Request, p principal) {
	var in struct {
		MaxPriority    string `json:"max_priority"`
		FairnessHeader bool   `json:"fairness_header"`
	}
	if !decode(w, r, &in) {
		return
	}
	if !config.ValidPriority(in.MaxPriority) {
		badRequest(w, "max_priority: must be critical, standard or sheddable")
		return
	}
	name := mux.Vars(r)["name"]
	if _, err := a.d.Store.SetKeyPriority(r.Context(), a.author(r, p), name, in.MaxPriority, in.FairnessHeader); a.written(w, "key "+name, err) {
		writeJSON(w, http.StatusOK, keyOut(a.d.Store.State().Keys[name]))
	}
}
