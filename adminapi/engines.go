package adminapi

import gossip "github.com/rolter/rolter/cluster/mesh"

// MeshEngines is an EngineInventory over a router's gossip view: GET
// /api/v1/cluster lists the engines as the view's Snapshot describes
// them, shared by `rolter router` and the tests.
type MeshEngines struct{ View *gossip.View }

// Engines implements EngineInventory.
func (m MeshEngines) Engines() []gossip.EngineSnapshot { return m.View.Snapshot().Engines }
