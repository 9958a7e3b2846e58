package cluster

import "github.com/prometheus/client_golang/prometheus"

// RegisterMetrics registers rolter_config_version (the config_version this
// router has applied) on reg.
func (s *Store) RegisterMetrics(reg prometheus.Registerer) error {
	return reg.Register(prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Name: "rolter_config_version",
		Help: "config_version of the control-plane state applied on this router.",
	}, func() float64 { return float64(s.State().ConfigVersion) }))
}
