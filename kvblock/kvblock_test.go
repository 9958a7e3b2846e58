package kvblock

import "testing"

func seq(n int, base uint32) []uint32 {
	out := make([]uint32, n)
	for i := range out {
		out[i] = base + uint32(i)
	}
	return out
}

func TestKeysSharedPrefixSharesKeys(t *testing.T) {
	a := append(seq(48, 100), seq(16, 9000)...)
	b := append(seq(48, 100), seq(16, 7000)...)
	ka, kb := Keys(nil, a, 16, 0), Keys(nil, b, 16, 0)
	if len(ka) != 4 || len(kb) != 4 {
		t.Fatalf("want 4 full blocks, got %d and %d", len(ka), len(kb))
	}
	for i := 0; i < 3; i++ {
		if ka[i] != kb[i] {
			t.Errorf("block %d: shared prefix must share keys", i)
		}
	}
	if ka[3] == kb[3] {
		t.Error("diverging last block must differ")
	}
}

func TestKeysChainDependsOnParent(t *testing.T) {
	// The same block contents after a different prefix is a different key.
	a := append(seq(16, 1), seq(16, 500)...)
	b := append(seq(16, 2), seq(16, 500)...)
	if Keys(nil, a, 16, 0)[1] == Keys(nil, b, 16, 0)[1] {
		t.Fatal("key must chain over the parent")
	}
}

func TestKeysPartialBlockHasNoKey(t *testing.T) {
	if n := len(Keys(nil, seq(31, 0), 16, 0)); n != 1 {
		t.Fatalf("31 tokens at block size 16: want 1 key, got %d", n)
	}
}

func TestExtraSeparatesAdaptersAndSalts(t *testing.T) {
	toks := seq(16, 0)
	base := Keys(nil, toks, 16, 0)[0]
	seen := map[uint64]string{base: "none"}
	for _, c := range []struct{ lora, salt string }{{"sql", ""}, {"", "sql"}, {"ab", "c"}, {"a", "bc"}} {
		k := Keys(nil, toks, 16, Extra(c.lora, c.salt))[0]
		if prev, dup := seen[k]; dup {
			t.Errorf("lora=%q salt=%q collides with %s", c.lora, c.salt, prev)
		}
		seen[k] = c.lora + "/" + c.salt
	}
}

func TestKeysStable(t *testing.T) {
	// Golden value: the key function is a wire format shared by sidecars
	// and routers of different versions; a change here breaks mixed fleets.
	got := Keys(nil, seq(16, 0), 16, 0)[0]
	const want = uint64(0xddd7650afb251041)
	if got != want {
		t.Fatalf("kvblock key changed: got %#x, want %#x", got, want)
	}
}

// The router keys a prompt with Keys, the sidecar an engine's stored
// blocks with Next one block at a time: for every block size, with and
// without extra keys, the two chains agree.
func TestKeysMatchNextChain(t *testing.T) {
	toks := make([]uint32, 16*64+5)
	for i := range toks {
		toks[i] = uint32(i*2654435761) >> 7
	}
	for _, bs := range []int{1, 8, 15, 16, 17, 32} {
		for _, extra := range []uint64{0, Extra("adapter-a", "salt")} {
			keys := Keys(nil, toks, bs, extra)
			if len(keys) != len(toks)/bs {
				t.Fatalf("block size %d: %d keys for %d tokens", bs, len(keys), len(toks))
			}
			parent := Root
			for i, k := range keys {
				parent = Next(parent, extra, toks[i*bs:(i+1)*bs])
				if k != parent {
					t.Fatalf("block size %d, extra %#x: key %d is %#x, the Next chain %#x", bs, extra, i, k, parent)
				}
			}
		}
	}
}

func BenchmarkKeys1024Blocks(b *testing.B) {
	toks := seq(1024*16, 3)
	dst := make([]uint64, 0, 1024)
	b.ReportAllocs()
	for b.Loop() {
		dst = Keys(dst[:0], toks, 16, 0)
	}
}
