package main

import (
	"errors"
	"fmt"
	"os"
	"runtime"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/sys/unix"
)

type packet struct {
	buf []byte
	n   int
	due int64
}

// direction moves packets from one tun fd to the other through a pathModel.
// The reader goroutine decides each packet's fate; the writer goroutine
// owns the delay line and sends each packet when it is due.
type direction struct {
	name     string
	in, out  int
	model    pathModel
	line     chan *packet
	pending  atomic.Int64 // packets in the delay line or being written by the writer
	stats    *DirectionStats
	clock    func() int64
	spin     time.Duration
	realtime bool
	pool     *sync.Pool
	onFatal  func(error)
}

func (d *direction) readLoop() {
	for {
		p := d.pool.Get().(*packet)
		n, err := unix.Read(d.in, p.buf)
		if err != nil {
			d.pool.Put(p)
			if errors.Is(err, unix.EINTR) || errors.Is(err, unix.EAGAIN) {
				continue
			}
			d.onFatal(fmt.Errorf("%s: read: %w", d.name, err))
			return
		}
		now := d.clock()
		d.stats.PacketsIn.Add(1)
		d.stats.BytesIn.Add(uint64(n))
		due, v := d.model.decide(now, n)
		switch v {
		case dropLoss:
			d.stats.DroppedLoss.Add(1)
			d.pool.Put(p)
		case dropQueue:
			d.stats.DroppedQueue.Add(1)
			d.pool.Put(p)
		case deliverNow:
			d.stats.Reordered.Add(1)
			d.send(p.buf[:n])
			d.pool.Put(p)
		case deliver:
			if due <= now && d.pending.Load() == 0 {
				// Nothing ahead of it and already due (0 ms configured):
				// skipping the hand-off to the writer keeps order and
				// saves a thread wake-up per packet.
				d.stats.DelayError.Add(d.clock() - due)
				d.send(p.buf[:n])
				d.pool.Put(p)
				continue
			}
			p.n, p.due = n, due
			d.pending.Add(1)
			select {
			case d.line <- p:
			default:
				d.pending.Add(-1)
				// The delay line is sized for far more than a bandwidth-delay
				// product; reaching its end means the writer cannot keep up.
				d.stats.DroppedOverflow.Add(1)
				d.pool.Put(p)
			}
		}
	}
}

func (d *direction) writeLoop() {
	// Go timers wake up to a millisecond late (the netpoller waits in
	// whole milliseconds), so the writer owns its thread and sleeps with
	// nanosleep under a 1 us timer slack instead.
	runtime.LockOSThread()
	unix.Prctl(unix.PR_SET_TIMERSLACK, 1000, 0, 0, 0)
	if d.realtime {
		// Real-time priority: on a busy machine an ordinary thread waits
		// milliseconds for a core, which is the whole delay error.
		// Best effort: without the privilege it stays an ordinary thread.
		unix.SchedSetAttr(0, &unix.SchedAttr{Size: unix.SizeofSchedAttr, Policy: 1 /* SCHED_FIFO */, Priority: 10}, 0)
	}
	for p := range d.line {
		d.waitUntil(p.due)
		d.stats.DelayError.Add(d.clock() - p.due)
		d.send(p.buf[:p.n])
		d.pool.Put(p)
		d.pending.Add(-1)
	}
}

func (d *direction) send(b []byte) {
	for {
		_, err := unix.Write(d.out, b)
		if err == nil {
			d.stats.PacketsOut.Add(1)
			d.stats.BytesOut.Add(uint64(len(b)))
			return
		}
		if errors.Is(err, unix.EINTR) {
			continue
		}
		// The receiving stack refused it (e.g. device going down at
		// teardown): the packet is lost like on a wire, never fatal.
		fmt.Fprintf(os.Stderr, "linkem: %s: write: %v\n", d.name, err)
		return
	}
}

// waitUntil sleeps until shortly before the deadline and spins the rest:
// even hrtimer wake-ups are late by tens of microseconds on a busy machine,
// spinning is exact to the clock read.
func (d *direction) waitUntil(due int64) {
	for {
		left := due - d.clock()
		if left <= 0 {
			return
		}
		if left > int64(d.spin) {
			ts := unix.NsecToTimespec(left - int64(d.spin))
			unix.Nanosleep(&ts, nil) // EINTR just means another round
		}
	}
}
