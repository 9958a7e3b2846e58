package mesh

import "flag"

// RegisterFlags adds the gossip-pool flags both `rolter router` and
// `rolter sidecar` take to fs: --gossip (default def, described by help)
// and the flags of Addrs's other fields. --join and --insecure-dev are
// each command's own (the router's --join also names Raft peers; its
// --insecure-dev also allows plaintext Raft).
func (a *Addrs) RegisterFlags(fs *flag.FlagSet, def, help string) {
	fs.StringVar(&a.Bind, "gossip", def, help)
	fs.StringVar(&a.Advertise, "gossip-advertise", "", "HOST:PORT other members reach this node's gossip at (default: --gossip)")
	fs.StringVar(&a.KeyFile, "gossip-key-file", "",
		"file holding the base64 gossip encryption key (default $"+KeyEnv+"; required unless --insecure-dev "+
			"or every gossip address is loopback)")
	fs.StringVar(&a.CertFile, "gossip-tls-cert", "", "PEM certificate of this member from the cluster CA, its common name the "+
		"node id: every gossip message is authenticated and only messages from their claimed sender are taken (with --gossip-tls-key, --gossip-tls-ca)")
	fs.StringVar(&a.CertKeyFile, "gossip-tls-key", "", "PEM private key (ECDSA P-256) of --gossip-tls-cert")
	fs.StringVar(&a.CAFile, "gossip-tls-ca", "", "PEM CA that signs every router's and sidecar's --gossip-tls-cert")
}
