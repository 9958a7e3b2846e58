package router

import (
	"encoding/json"
	"net/http"
)

type modelList struct {
	Object string      `json:"object"`
	Data   []modelInfo `json:"data"`
}

type modelInfo struct {
	ID      string `json:"id"`
	Object  string `json:"object"`
	Created int64  `json:"created"`
	OwnedBy string `json:"owned_by"`
}

// serveModels answers GET /v1/models with the addresses the caller's key
// may use: every route's model name; for each provider group, one
// "slug/<model>" per distinct model its members declare, plus "slug/*"
// when a member is passthrough (any model name after "slug/" is then
// forwarded as is). Provider pins ("provider/model") work but are not
// listed: they bypass balancing and are an operator's tool.
func (s *Server) serveModels(w answer, r inbound) {
	sn := s.awaitSnapshot(r.Context())
	if sn == nil {
		writeError(w, ErrNoConfig, noConfigRetryAfter)
		return
	}
	key, err := sn.authenticate(r.bearer())
	if err != nil {
		writeError(w, err, 0)
		return
	}
	out := modelList{Object: "list", Data: make([]modelInfo, 0, len(sn.models))}
	for _, m := range sn.models {
		if key.allows(m) {
			out.Data = append(out.Data, modelInfo{ID: m, Object: "model", OwnedBy: "rolter"})
		}
	}
	w.setHeader("Content-Type", valueJSON)
	w.commit(http.StatusOK)
	_ = json.NewEncoder(w).Encode(out)
}
