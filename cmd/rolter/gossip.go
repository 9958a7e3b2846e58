package main

import (
	"flag"

	"github.com/rolter/rolter/cluster/mesh"
)

// registerGossipFlags adds the gossip-pool flags both `rolter router` and
// `rolter sidecar` take. --join and --insecure-dev are registered by each
// command (the router's --join also names Raft peers; its --insecure-dev
// also allows plaintext Raft).
func registerGossipFlags(fs *flag.FlagSet, a *mesh.Addrs, def, help string) {
	fs.StringVar(&a.Bind, "gossip", def, help)
	fs.StringVar(&a.Advertise, "gossip-advertise", "", "HOST:PORT other members reach this node's gossip at (default: --gossip)")
	fs.StringVar(&a.KeyFile, "gossip-key-file", "",
		"file holding the base64 gossip encryption key (default $"+mesh.KeyEnv+"; required unless --insecure-dev "+
			"or every gossip address is loopback)")
}
