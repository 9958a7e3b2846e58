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

// BenchmarkSign and BenchmarkVerify measure what identity costs per
// message of a typical size: a status (120 B) and a 150-key delta
// (1250 B).
func BenchmarkSign(b *testing.B) {
	for _, keyType := range []string{KeyECDSA, KeyEd25519} {
		s := signer{key: benchIdentity(b, keyType).Key}
		for _, size := range []int{120, 1250} {
			msg := make([]byte, size)
			b.Run(keyType+"/"+strconv.Itoa(size), func(b *testing.B) { measureCPU(b, func() { s.seal(msg) }) })
		}
	}
}

func BenchmarkVerify(b *testing.B) {
	for _, keyType := range []string{KeyECDSA, KeyEd25519} {
		id := benchIdentity(b, keyType)
		v, err := verifierOf(id.Leaf.PublicKey)
		if err != nil {
			b.Fatal(err)
		}
		for _, size := range []int{120, 1250} {
			sealed := signer{key: id.Key}.seal(make([]byte, size))
			b.Run(keyType+"/"+strconv.Itoa(size), func(b *testing.B) {
				measureCPU(b, func() {
					signed, sig, _ := unseal(sealed)
					if !v(signed, sig) {
						b.Fatal("signature does not verify")
					}
				})
			})
		}
	}
}
