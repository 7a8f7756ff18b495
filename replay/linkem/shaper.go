package main

// Shaper is a bottleneck of a fixed rate in front of a drop-tail queue: a
// packet waits behind those already queued and is dropped if the queue
// would exceed its packet or byte limit. Times are nanoseconds on the
// monotonic clock of the relay; the shaper itself never reads a clock so
// tests can drive it.
type Shaper struct {
	RateBitsPerSec float64 // 0: unlimited, packets pass at once
	LimitPackets   int     // 0: no packet limit
	LimitBytes     int     // 0: no byte limit

	busyUntil   int64
	queue       []queued // packets admitted but not yet fully sent, oldest first
	head        int
	queuedBytes int
}

type queued struct {
	departs int64
	size    int
}

// Admit returns when the packet leaves the bottleneck, or ok=false when the
// queue is full (a drop-tail drop).
func (s *Shaper) Admit(now int64, size int) (departs int64, ok bool) {
	if s.RateBitsPerSec <= 0 {
		return now, true
	}
	s.expire(now)
	n := len(s.queue) - s.head
	if s.LimitPackets > 0 && n+1 > s.LimitPackets {
		return 0, false
	}
	if s.LimitBytes > 0 && s.queuedBytes+size > s.LimitBytes {
		return 0, false
	}
	start := max(now, s.busyUntil)
	s.busyUntil = start + int64(float64(size)*8e9/s.RateBitsPerSec)
	s.queue = append(s.queue, queued{s.busyUntil, size})
	s.queuedBytes += size
	return s.busyUntil, true
}

// Backlog is the number of packets and bytes still waiting at time now.
func (s *Shaper) Backlog(now int64) (packets, bytes int) {
	s.expire(now)
	return len(s.queue) - s.head, s.queuedBytes
}

func (s *Shaper) expire(now int64) {
	for s.head < len(s.queue) && s.queue[s.head].departs <= now {
		s.queuedBytes -= s.queue[s.head].size
		s.head++
	}
	// Compact once the consumed prefix dominates, so the slice stays
	// bounded by the queue limit instead of growing with traffic.
	if s.head > 1024 && s.head*2 > len(s.queue) {
		s.queue = append(s.queue[:0], s.queue[s.head:]...)
		s.head = 0
	}
}
