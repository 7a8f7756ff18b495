package main

import "math/rand/v2"

// LossModel decides, packet by packet, whether the link drops it.
type LossModel interface {
	Drop(rng *rand.Rand) bool
}

// Bernoulli drops each packet independently with probability P (0..1).
type Bernoulli struct{ P float64 }

func (b *Bernoulli) Drop(rng *rand.Rand) bool { return b.P > 0 && rng.Float64() < b.P }

// GilbertElliott is the two-state burst-loss model with netem's `gemodel`
// parameters: P moves good->bad, R moves bad->good, LossBad (netem's 1-h)
// and LossGood (netem's 1-k) are the drop probabilities inside each state.
type GilbertElliott struct {
	P, R, LossBad, LossGood float64
	bad                     bool
}

func (g *GilbertElliott) Drop(rng *rand.Rand) bool {
	// Decide in the current state first, then move: a burst therefore
	// starts on the packet after the transition, as in netem.
	p := g.LossGood
	if g.bad {
		p = g.LossBad
	}
	drop := rng.Float64() < p
	if g.bad {
		if rng.Float64() < g.R {
			g.bad = false
		}
	} else if rng.Float64() < g.P {
		g.bad = true
	}
	return drop
}

// StationaryLoss is the long-run drop probability, used by tests and by the
// stats output to say what the configured model should give.
func (g *GilbertElliott) StationaryLoss() float64 {
	if g.P+g.R == 0 {
		return g.LossGood
	}
	return (g.R*g.LossGood + g.P*g.LossBad) / (g.P + g.R)
}
