package workload

import "time"

// SpreadTies gives requests that share a send time distinct times, in
// their order, evenly over the interval up to the next distinct time (the
// last group uses the mean interval between distinct times). reqs must be
// in time order; it is modified in place and returned.
//
// A trace with coarse timestamps (the Mooncake conversation trace's are on
// a ~3 s grid) has bursts of requests at one instant. Their order at an
// engine is then undefined: the simulator takes the trace's order, while
// a real replay delivers them in the order their HTTP path finishes,
// shortest prompts first, and the two disagree on time to first token
// for reasons no router causes. Spread, the order is the trace's in both.
func SpreadTies(reqs []Request) []Request {
	var groups []int // index of the first request of each group of equal times
	for i := range reqs {
		if i == 0 || reqs[i].At != reqs[i-1].At {
			groups = append(groups, i)
		}
	}
	if len(groups) < 2 {
		return reqs
	}
	meanGap := (reqs[len(reqs)-1].At - reqs[0].At) / time.Duration(len(groups)-1)
	for g, start := range groups {
		end, gap := len(reqs), meanGap
		if g+1 < len(groups) {
			end = groups[g+1]
			gap = reqs[end].At - reqs[start].At
		}
		n := time.Duration(end - start)
		at := reqs[start].At
		for k := start; k < end; k++ {
			reqs[k].At = at + time.Duration(k-start)*gap/n
		}
	}
	return reqs
}
