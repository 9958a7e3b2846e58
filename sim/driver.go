package sim

import (
	"context"
	"sync"
	"time"

	"github.com/rolter/rolter/sim/engine"
)

// Clock is the wall clock the driver maps virtual time onto.
type Clock interface {
	Now() time.Time
}

type wallClock struct{}

func (wallClock) Now() time.Time { return time.Now() }

// progress is one request's stream as the driver reports it. The driver
// never blocks on a slow reader: it updates the counters under mu and
// pokes notify (capacity 1).
type progress struct {
	mu       sync.Mutex
	tokens   int
	done     bool
	aborted  bool
	comp     engine.Completion
	notify   chan struct{}
	maxToken int
	// submitted is the wall clock when the request reached the engine.
	submitted time.Time
}

func (p *progress) snapshot() (tokens int, done bool, comp engine.Completion) {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.tokens, p.done, p.comp
}

// driver runs an engine in real time: each step's modelled duration,
// divided by speed, is slept before its outputs are delivered. All engine
// calls happen under mu; the step loop is the only goroutine that sleeps.
type driver struct {
	clock Clock
	speed float64
	start time.Time

	mu      sync.Mutex
	eng     *engine.Engine
	streams map[string]*progress
	wake    chan struct{}
	onStep  func(engine.StepResult) // called outside mu, in step order
	onDone  func(engine.Completion)
}

func newDriver(eng *engine.Engine, clock Clock, speed float64) *driver {
	if speed <= 0 {
		speed = 1
	}
	return &driver{clock: clock, speed: speed, start: clock.Now(), eng: eng,
		streams: make(map[string]*progress), wake: make(chan struct{}, 1)}
}

// virtualNow is the engine time that corresponds to the wall clock now.
func (d *driver) virtualNow() time.Duration {
	return time.Duration(float64(d.clock.Now().Sub(d.start)) * d.speed)
}

// wallAt is the wall time at which virtual time v happens.
func (d *driver) wallAt(v time.Duration) time.Time {
	return d.start.Add(time.Duration(float64(v) / d.speed))
}

// submit queues a request and returns its progress. Its arrival is now,
// or, when sent is not zero, sent: the wall clock at which the client
// sent it (rolter sim --client-clock), so that the time the request
// spent on its way here is part of its wait, and requests sent in one
// order queue in that order whatever order their HTTP paths finish in.
func (d *driver) submit(r engine.Request, sent time.Time) (*progress, error) {
	p := &progress{notify: make(chan struct{}, 1), maxToken: r.MaxTokens, submitted: d.clock.Now()}
	d.mu.Lock()
	vnow := d.virtualNow()
	if sent.IsZero() {
		if d.eng.Idle() {
			d.eng.AdvanceTo(vnow)
		}
		r.Arrival = min(vnow, d.eng.Now())
	} else {
		r.Arrival = max(min(time.Duration(float64(sent.Sub(d.start))*d.speed), vnow), 0)
		if d.eng.Idle() {
			d.eng.AdvanceTo(r.Arrival)
		}
	}
	if err := d.eng.Submit(r); err != nil {
		d.mu.Unlock()
		return nil, err
	}
	d.streams[r.ID] = p
	d.mu.Unlock()
	select {
	case d.wake <- struct{}{}:
	default:
	}
	return p, nil
}

// abort drops a request (client gone, injected death).
func (d *driver) abort(id string) {
	d.mu.Lock()
	d.eng.Abort(id)
	p := d.streams[id]
	delete(d.streams, id)
	d.mu.Unlock()
	if p != nil {
		p.mu.Lock()
		p.aborted = true
		p.mu.Unlock()
	}
}

// with runs f with the engine locked.
func (d *driver) with(f func(e *engine.Engine)) {
	d.mu.Lock()
	defer d.mu.Unlock()
	f(d.eng)
}

// run is the step loop; it returns when ctx ends.
func (d *driver) run(ctx context.Context) {
	timer := time.NewTimer(time.Hour)
	defer timer.Stop()
	for ctx.Err() == nil {
		d.mu.Lock()
		res, ok := d.eng.Step()
		later := false
		if !ok {
			// A request stamped after the engine's clock (it ran behind
			// the wall clock when the request came) waits for no wake-up.
			var at time.Duration
			if at, later = d.eng.NextArrival(); later {
				d.eng.AdvanceTo(at)
			}
		}
		d.mu.Unlock()
		if !ok {
			if len(res.Events) > 0 && d.onStep != nil {
				d.onStep(res)
			}
			if later {
				continue
			}
			select {
			case <-d.wake:
			case <-ctx.Done():
				return
			}
			continue
		}
		if wait := d.wallAt(res.End).Sub(d.clock.Now()); wait > 0 {
			timer.Reset(wait)
			select {
			case <-timer.C:
			case <-ctx.Done():
				return
			}
		}
		d.deliver(res)
	}
}

func (d *driver) deliver(res engine.StepResult) {
	if d.onStep != nil {
		d.onStep(res)
	}
	done := make(map[string]engine.Completion, len(res.Completed))
	for _, c := range res.Completed {
		done[c.ID] = c
		if d.onDone != nil {
			d.onDone(c)
		}
	}
	d.mu.Lock()
	for _, o := range res.Outputs {
		p := d.streams[o.ID]
		if p == nil {
			continue
		}
		p.mu.Lock()
		p.tokens++
		if o.Done {
			p.done = true
			p.comp = done[o.ID]
		}
		p.mu.Unlock()
		if o.Done {
			delete(d.streams, o.ID)
		}
		select {
		case p.notify <- struct{}{}:
		default:
		}
	}
	d.mu.Unlock()
}
