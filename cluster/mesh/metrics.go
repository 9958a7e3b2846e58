package mesh

import (
	"sync/atomic"

	"github.com/prometheus/client_golang/prometheus"
)

// collector exports a member's Stats and, on a router, its view's engine
// states.
type collector struct {
	c    *core
	view *View // nil on a sidecar
	// age is the router's histogram of peer load age on arrival (nil on
	// a sidecar).
	age prometheus.Histogram
}

var (
	descMembers = prometheus.NewDesc("rolter_gossip_members", "Live members of the gossip pool, this node included.", nil, nil)
	descEngines = prometheus.NewDesc("rolter_gossip_engines", "Engines in this router's cluster view, by residency state.", []string{"state"}, nil)
	descBlocks  = prometheus.NewDesc("rolter_gossip_resident_blocks", "Resident (engine, block) pairs in this router's view.", nil, nil)
	descIndex   = prometheus.NewDesc("rolter_gossip_residency_index_bytes", "Memory held by this router's residency index.", nil, nil)
	descReject  = prometheus.NewDesc("rolter_gossip_rejected_total",
		"Messages and joins refused by gossip identity: no_mac, unknown_key (no verified certificate for the claimed sender yet), "+
			"bad_mac (not under the key shared with the claimed sender), bad_certificate, no_identity (a joiner without a certificate), "+
			"name_taken (a joiner under a live member's name with another certificate).", []string{"reason"}, nil)
)

type counterDesc struct {
	desc *prometheus.Desc
	get  func(*Stats) *atomic.Uint64
}

func newCounter(name, help string, get func(*Stats) *atomic.Uint64) counterDesc {
	return counterDesc{prometheus.NewDesc("rolter_gossip_"+name, help, nil, nil), get}
}

var counters = []counterDesc{
	newCounter("messages_sent_total", "Mesh messages sent.", func(s *Stats) *atomic.Uint64 { return &s.MsgsSent }),
	newCounter("messages_received_total", "Mesh messages received.", func(s *Stats) *atomic.Uint64 { return &s.MsgsReceived }),
	newCounter("message_bytes_sent_total", "Bytes of mesh messages sent (before encryption and framing).", func(s *Stats) *atomic.Uint64 { return &s.AppBytesSent }),
	newCounter("send_errors_total", "Mesh messages that failed to send.", func(s *Stats) *atomic.Uint64 { return &s.SendErrors }),
	newCounter("malformed_total", "Received messages dropped as malformed or out of bounds.", func(s *Stats) *atomic.Uint64 { return &s.Malformed }),
	newCounter("unknown_sender_total", "Received messages dropped: sender not a known member of the right role.", func(s *Stats) *atomic.Uint64 { return &s.UnknownSender }),
	newCounter("conflicts_total", "Messages or members dropped: a second sidecar claimed a live engine URL.", func(s *Stats) *atomic.Uint64 { return &s.Conflicts }),
	newCounter("keys_dropped_total", "Block keys refused by the per-engine or total caps.", func(s *Stats) *atomic.Uint64 { return &s.KeysDropped }),
	newCounter("engines_refused_total", "Engines refused by the engine cap.", func(s *Stats) *atomic.Uint64 { return &s.EnginesRefused }),
	newCounter("resyncs_requested_total", "Resync requests this router sent.", func(s *Stats) *atomic.Uint64 { return &s.ResyncsAsked }),
	newCounter("full_states_applied_total", "Full residency states this router applied.", func(s *Stats) *atomic.Uint64 { return &s.FullsApplied }),
	newCounter("divergences_total", "Residency views found diverged by count/digest.", func(s *Stats) *atomic.Uint64 { return &s.Divergences }),
	newCounter("full_states_sent_total", "Full residency states this sidecar sent.", func(s *Stats) *atomic.Uint64 { return &s.FullsSent }),
	newCounter("deltas_resent_total", "Residency deltas this sidecar resent on request.", func(s *Stats) *atomic.Uint64 { return &s.DeltasResent }),
	newCounter("node_id_conflicts_total", "Times another member claimed this node's id (node name) or this node another's: both processes need distinct --node-id.", func(s *Stats) *atomic.Uint64 { return &s.NameConflicts }),
	newCounter("learned_dropped_total", "Shared learned records dropped because a queue was full.", func(s *Stats) *atomic.Uint64 { return &s.LearnedDropped }),
}

func (c *collector) Describe(ch chan<- *prometheus.Desc) {
	ch <- descMembers
	ch <- descEngines
	ch <- descBlocks
	ch <- descIndex
	ch <- descReject
	for _, d := range counters {
		ch <- d.desc
	}
	if c.age != nil {
		c.age.Describe(ch)
	}
}

func (c *collector) Collect(ch chan<- prometheus.Metric) {
	ch <- prometheus.MustNewConstMetric(descMembers, prometheus.GaugeValue, float64(c.c.NumMembers()))
	for _, d := range counters {
		ch <- prometheus.MustNewConstMetric(d.desc, prometheus.CounterValue, float64(d.get(&c.c.stats).Load()))
	}
	for reason, name := range rejectReasons {
		ch <- prometheus.MustNewConstMetric(descReject, prometheus.CounterValue, float64(c.c.stats.Rejected[reason].Load()), name)
	}
	if c.view == nil {
		return
	}
	c.age.Collect(ch)
	var byState [4]int
	for _, e := range *c.view.engines.Load() {
		byState[min(e.state.Load(), 3)]++
	}
	for st, cnt := range byState {
		ch <- prometheus.MustNewConstMetric(descEngines, prometheus.GaugeValue, float64(cnt), ResidencyState(st).String())
	}
	bytes, blocks := c.view.residencyBytes()
	ch <- prometheus.MustNewConstMetric(descBlocks, prometheus.GaugeValue, float64(blocks))
	ch <- prometheus.MustNewConstMetric(descIndex, prometheus.GaugeValue, float64(bytes))
}
