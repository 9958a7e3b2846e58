package adminapi

import gossip "github.com/rolter/rolter/cluster/mesh"

// MeshEngines is an EngineInventory over a router's gossip member: GET
// /api/v1/cluster lists the engines as its Snapshot describes them, shared
// by `rolter router` and the tests.
type MeshEngines struct{ Mesh *gossip.Router }

// Engines implements EngineInventory.
func (m MeshEngines) Engines() []gossip.EngineSnapshot { return m.Mesh.Snapshot().Engines }
