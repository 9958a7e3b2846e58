//go:build unix

package mesh

import (
	"strconv"
	"syscall"
	"testing"
	"time"
)

// cpuTime is the CPU time this process has used (user + system).
func cpuTime(b *testing.B) time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		b.Fatal(err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// measureCPU runs f b.N times and reports the CPU time per call as well
// as the wall time: on a shared machine the wall time mostly measures the
// other tenants.
func measureCPU(b *testing.B, f func()) {
	start := cpuTime(b)
	for b.Loop() {
		f()
	}
	b.ReportMetric(float64(cpuTime(b)-start)/float64(b.N), "cpu-ns/op")
}

// BenchmarkSeal and BenchmarkCheck measure what identity costs per message
// of a typical size (a status, 120 B; a 150-key delta, 1250 B): the MAC a
// sender adds for each receiver, and the check a receiver makes.
// BenchmarkPairKey is the ECDH and HKDF a member does once per peer.
func BenchmarkSeal(b *testing.B) {
	key := make([]byte, 32)
	for _, size := range []int{120, 1250} {
		msg := make([]byte, size)
		b.Run(strconv.Itoa(size), func(b *testing.B) { measureCPU(b, func() { seal(key, 1, msg) }) })
	}
}

func BenchmarkCheck(b *testing.B) {
	key := make([]byte, 32)
	for _, size := range []int{120, 1250} {
		sealed := seal(key, 1, make([]byte, size))
		b.Run(strconv.Itoa(size), func(b *testing.B) {
			measureCPU(b, func() {
				signed, mac, _ := unseal(sealed)
				if string(mac) != string(macOf(key, signed)) {
					b.Fatal("MAC does not check")
				}
			})
		})
	}
}

func BenchmarkPairKey(b *testing.B) {
	a, p := benchIdentity(b), benchIdentity(b)
	pub, err := exchangeKey(p.Leaf.PublicKey)
	if err != nil {
		b.Fatal(err)
	}
	ida, idp := end{keyIDOf(a.Chain[0]), 1}, end{keyIDOf(p.Chain[0]), 2}
	measureCPU(b, func() {
		if _, err := pairKey(a.Key, ida, pub, idp); err != nil {
			b.Fatal(err)
		}
	})
}
