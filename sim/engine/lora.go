package engine

import "sort"

// loras is the set of adapters resident on the GPU: at most max, evicted
// least-recently-used among those no running request needs.
type loras struct {
	max      int
	resident map[string]uint64 // name → last use tick
	known    map[string]int    // loaded-by-API adapters → integer id
	tick     uint64
	nextID   int
	loads    uint64
}

func newLoras(max int) *loras {
	return &loras{max: max, resident: make(map[string]uint64), known: make(map[string]int), nextID: 1}
}

// id returns the integer id of an adapter, assigning one on first sight.
func (l *loras) id(name string) int {
	if name == "" {
		return 0
	}
	if id, ok := l.known[name]; ok {
		return id
	}
	id := l.nextID
	l.nextID++
	l.known[name] = id
	return id
}

// ensure makes name resident, evicting the least recently used adapter not
// in busy. It reports whether a load happened and false ok when every slot
// is busy.
func (l *loras) ensure(name string, busy map[string]int) (loaded, ok bool) {
	l.tick++
	if _, hit := l.resident[name]; hit {
		l.resident[name] = l.tick
		return false, true
	}
	if len(l.resident) >= l.max {
		victim, oldest := "", uint64(0)
		for n, t := range l.resident {
			if busy[n] > 0 {
				continue
			}
			if victim == "" || t < oldest || (t == oldest && n < victim) {
				victim, oldest = n, t
			}
		}
		if victim == "" {
			return false, false
		}
		delete(l.resident, victim)
	}
	l.resident[name] = l.tick
	l.id(name)
	l.loads++
	return true, true
}

// unload drops name from residency (API unload).
func (l *loras) unload(name string) bool {
	_, ok := l.resident[name]
	delete(l.resident, name)
	delete(l.known, name)
	return ok
}

// names returns the resident adapters, sorted.
func (l *loras) names() []string {
	out := make([]string, 0, len(l.resident))
	for n := range l.resident {
		out = append(out, n)
	}
	sort.Strings(out)
	return out
}
