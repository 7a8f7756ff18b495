package main

import (
	"math/rand/v2"
	"time"
)

// DirectionConfig is what one direction of the emulated path does to the
// packets crossing it, in the order applied: loss, rate with a drop-tail
// queue, then propagation delay with jitter (or none for reordered ones).
type DirectionConfig struct {
	Delay  time.Duration
	Jitter time.Duration // uniform in [-Jitter, +Jitter]; order is kept, as on a real path
	Loss   LossModel     // nil: no random loss
	// ReorderP sends a packet at once, skipping the delay, so it overtakes
	// the ones in flight: netem's `reorder` semantics.
	ReorderP float64
	Shaper   Shaper
}

// treatsBurstsAlike says whether every packet of a GSO burst would get the
// burst's own verdict and due time: true for a pure delay, which moves the
// whole burst as it arrived (at once, as an unlimited link would). Loss,
// rate, jitter and reordering act per wire packet, so with any of them the
// kernel segments bursts before linkem sees them.
func (c DirectionConfig) treatsBurstsAlike() bool {
	return c.Loss == nil && c.Shaper.RateBitsPerSec == 0 && c.Jitter == 0 && c.ReorderP == 0
}

type verdict int

const (
	deliver verdict = iota
	deliverNow
	dropLoss
	dropQueue
)

// pathModel turns the arrival of a packet into a verdict and a due time.
// It is pure (no clock, no I/O) so the tests can drive it with synthetic
// time; exactly one goroutine owns it.
type pathModel struct {
	cfg     DirectionConfig
	rng     *rand.Rand
	lastDue int64
}

func (m *pathModel) decide(now int64, size int) (int64, verdict) {
	if m.cfg.Loss != nil && m.cfg.Loss.Drop(m.rng) {
		return 0, dropLoss
	}
	departs, ok := m.cfg.Shaper.Admit(now, size)
	if !ok {
		return 0, dropQueue
	}
	if m.cfg.ReorderP > 0 && m.rng.Float64() < m.cfg.ReorderP {
		return departs, deliverNow
	}
	due := departs + int64(m.cfg.Delay)
	if m.cfg.Jitter > 0 {
		due += m.rng.Int64N(2*int64(m.cfg.Jitter)+1) - int64(m.cfg.Jitter)
	}
	// Keeping due times monotonic is what lets the delay line be a FIFO
	// (time-ordered by construction) instead of a heap.
	if due < m.lastDue {
		due = m.lastDue
	}
	m.lastDue = due
	return due, deliver
}
