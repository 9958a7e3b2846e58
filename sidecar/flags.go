package sidecar

import "flag"

// RegisterFlags adds `rolter sidecar`'s flags for c's fields, with their
// defaults, to fs: the Sidecar's, the gossip pool's and discovery's. The
// metrics listener's TLS flags are the command's.
func (c *ProcessConfig) RegisterFlags(fs *flag.FlagSet) {
	c.Sidecar.RegisterFlags(fs)
	c.Gossip.RegisterFlags(fs, "127.0.0.1:7946", "HOST:PORT of this sidecar's gossip (memberlist, UDP and TCP)")
	fs.StringVar(&c.Join, "join", "", "comma-separated gossip seeds HOST:PORT (routers' or other sidecars' --gossip)")
	fs.BoolVar(&c.InsecureDev, "insecure-dev", false, "allow unencrypted gossip without a key on non-loopback addresses "+
		"(development and tests only; on loopback only it is allowed with a warning)")
	fs.StringVar(&c.EngineAdvertise, "engine-advertise", "",
		"engine URL routers reach and name in their routes (default --engine; set it when --engine is loopback)")
	fs.StringVar(&c.Models, "models", "", "comma-separated models the engine serves, announced for discovery "+
		"(default: read from the engine's /v1/models, waiting for it to answer)")
}
