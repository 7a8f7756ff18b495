package main

import (
	"sync/atomic"
)

// errorHistogram counts delay errors (how far the actual send time is from
// the intended one, early or late) in microsecond buckets; the last bucket
// collects everything beyond.
const histBuckets = 20000

type errorHistogram struct {
	counts [histBuckets + 1]atomic.Uint64
	maxNs  atomic.Int64
}

func (h *errorHistogram) Add(errNs int64) {
	if errNs < 0 {
		errNs = -errNs // sent early (see waitUntil): as much an error as late
	}
	if errNs > h.maxNs.Load() {
		h.maxNs.Store(errNs) // single writer per direction: no CAS loop needed
	}
	b := errNs / 1000
	if b > histBuckets {
		b = histBuckets
	}
	h.counts[b].Add(1)
}

// Quantile returns the q-quantile in microseconds (bucket upper edge).
func (h *errorHistogram) Quantile(q float64) float64 {
	var total uint64
	for i := range h.counts {
		total += h.counts[i].Load()
	}
	if total == 0 {
		return 0
	}
	rank := uint64(q*float64(total-1)) + 1
	var seen uint64
	for i := range h.counts {
		seen += h.counts[i].Load()
		if seen >= rank {
			return float64(i + 1)
		}
	}
	return float64(histBuckets)
}

// DirectionStats are the per-direction counters linkem reports; the JSON
// names are what replay/link.py reads.
type DirectionStats struct {
	PacketsIn       atomic.Uint64 // wire packets: a GSO burst counts as its segments
	BurstsIn        atomic.Uint64 // GSO bursts taken whole (one read, several wire packets)
	BytesIn         atomic.Uint64
	PacketsOut      atomic.Uint64
	BurstsOut       atomic.Uint64 // writes that merged several UDP datagrams (see coalesce)
	BytesOut        atomic.Uint64
	DroppedLoss     atomic.Uint64
	DroppedQueue    atomic.Uint64
	DroppedOverflow atomic.Uint64
	Reordered       atomic.Uint64
	DelayError      errorHistogram
}

func (d *DirectionStats) Snapshot() map[string]any {
	return map[string]any{
		"packets_in":         d.PacketsIn.Load(),
		"bytes_in":           d.BytesIn.Load(),
		"bursts_in":          d.BurstsIn.Load(),
		"packets_out":        d.PacketsOut.Load(),
		"bytes_out":          d.BytesOut.Load(),
		"bursts_out":         d.BurstsOut.Load(),
		"dropped_loss":       d.DroppedLoss.Load(),
		"dropped_queue":      d.DroppedQueue.Load(),
		"dropped_overflow":   d.DroppedOverflow.Load(),
		"reordered":          d.Reordered.Load(),
		"delay_error_p50_us": d.DelayError.Quantile(0.50),
		"delay_error_p99_us": d.DelayError.Quantile(0.99),
		"delay_error_max_us": float64(d.DelayError.maxNs.Load()) / 1000,
	}
}
