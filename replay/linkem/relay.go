package main

import (
	"errors"
	"fmt"
	"os"
	"runtime"
	"sync/atomic"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"
)

// maxFrame is the largest read from a tun fd: a 64 KB GSO burst and its
// virtio_net_hdr.
const maxFrame = vnetHdrLen + 65535

type packet struct {
	buf       []byte // from the pool of its size class
	n         int    // frame length (virtio_net_hdr included)
	due       int64
	segments  int // wire packets it stands for (a GSO burst: several)
	wireBytes int
}

// bufferPools hands out packet buffers in two sizes so that a delay line
// full of small packets does not hold 64 KB each: MTU-sized frames and
// whole GSO bursts. Buffers are never freed, only returned: in steady state
// linkem allocates nothing, so the garbage collector never runs (see
// runRelay) and never stops a real-time thread half way.
type bufferPools struct {
	smallSize  int
	small, big chan *packet
}

// newBufferPools keeps up to `keep` returned buffers of each size: as many
// as the delay lines hold, so that none is ever let go to the (idle)
// garbage collector.
func newBufferPools(mtu, keep int) *bufferPools {
	return &bufferPools{smallSize: vnetHdrLen + mtu, small: make(chan *packet, keep), big: make(chan *packet, keep)}
}

func (b *bufferPools) get(n int) *packet {
	free, size := b.small, b.smallSize
	if n > b.smallSize {
		free, size = b.big, maxFrame
	}
	select {
	case p := <-free:
		return p
	default:
		return &packet{buf: make([]byte, size)}
	}
}

func (b *bufferPools) put(p *packet) {
	free := b.small
	if len(p.buf) != b.smallSize {
		free = b.big
	}
	select {
	case free <- p:
	default: // more in flight than the delay lines hold: let this one go
	}
}

// direction moves packets from one tun fd to the other through a pathModel.
// The reader goroutine decides each packet's fate; the writer goroutine
// owns the delay line and sends each packet when it is due.
type direction struct {
	pacer
	name     string
	in, out  int
	model    pathModel
	line     chan *packet
	pending  atomic.Int64 // packets in the delay line or being written by the writer
	stats    *DirectionStats
	realtime bool
	pools    *bufferPools
	onFatal  func(error)
}

// pacer decides how a thread waits for a deadline; `linkem timer` measures
// the same policy alone, which tells the machine's part of the delay error
// from linkem's.
type pacer struct {
	clock func() int64
	spin  time.Duration
	early time.Duration
}

// readBatch is how many packets that pass at once (zero delay) the reader
// gathers from those already waiting in the tun queue before writing them
// on together; each may wait for the reads after it, about a microsecond
// each.
const readBatch = 16

func (d *direction) readLoop() {
	// The reader stamps each packet's arrival: if it waits for a core,
	// packets age in the tun queue unseen and the delay comes out long.
	// So it ranks above the writer, which it interrupts for a few
	// microseconds a packet.
	ownThread(readerPriority, d.realtime)
	// Packets passing at once (see below) stay in the reader's own buffers
	// until written; the others are copied into right-sized pool buffers.
	own := make([]*packet, readBatch)
	for i := range own {
		own[i] = &packet{buf: make([]byte, maxFrame)}
	}
	passing := make([]*packet, 0, readBatch)
	frames := make([][]byte, 0, readBatch)
	burst := make([]byte, maxFrame)
	flush := func() {
		if len(passing) > 0 {
			frames = frames[:0]
			for _, p := range passing {
				frames = append(frames, p.buf[:p.n])
			}
			d.sendBatch(passing, frames, burst)
			passing = passing[:0]
		}
	}
	for {
		p := own[len(passing)]
		n, err := rawRead(d.in, p.buf)
		if err != nil {
			if errors.Is(err, unix.EAGAIN) { // the tun queue is empty
				flush()
				waitReadable(d.in)
				continue
			}
			if errors.Is(err, unix.EINTR) {
				continue
			}
			d.onFatal(fmt.Errorf("%s: read: %w", d.name, err))
			return
		}
		now := d.clock()
		frame := p.buf[:n]
		segments, wireBytes := wireSegments(frame)
		d.stats.PacketsIn.Add(uint64(segments))
		if segments > 1 {
			d.stats.BurstsIn.Add(1)
		}
		d.stats.BytesIn.Add(uint64(wireBytes))
		due, v := d.model.decide(now, wireBytes)
		switch v {
		case dropLoss:
			d.stats.DroppedLoss.Add(uint64(segments))
		case dropQueue:
			d.stats.DroppedQueue.Add(uint64(segments))
		case deliverNow:
			flush()
			d.stats.Reordered.Add(uint64(segments))
			d.send(frame, segments, wireBytes)
		case deliver:
			if due <= now && d.pending.Load() == 0 {
				// Nothing ahead of it and already due (0 ms configured):
				// skipping the hand-off to the writer keeps order and
				// saves a copy and a thread wake-up per packet.
				p.n, p.due, p.segments, p.wireBytes = n, due, segments, wireBytes
				passing = append(passing, p)
				if len(passing) == readBatch {
					flush()
				}
				continue
			}
			flush()
			q := d.pools.get(n)
			q.n = copy(q.buf, frame)
			q.due, q.segments, q.wireBytes = due, segments, wireBytes
			d.pending.Add(1)
			select {
			case d.line <- q:
			default:
				d.pending.Add(-1)
				// The delay line is sized for far more than a bandwidth-delay
				// product; reaching its end means the writer cannot keep up.
				d.stats.DroppedOverflow.Add(uint64(segments))
				d.pools.put(q)
			}
		}
	}
}

// SCHED_FIFO priorities of the threads that move packets (1..99).
const (
	writerPriority = 10
	readerPriority = 11
)

// ownThread pins the calling goroutine to its thread and, with realtime,
// raises that thread to SCHED_FIFO at the given priority.
func ownThread(priority int, realtime bool) {
	// Go timers wake up to a millisecond late (the netpoller waits in
	// whole milliseconds), so the writer owns its thread and sleeps with
	// nanosleep under a 1 us timer slack instead.
	runtime.LockOSThread()
	unix.Prctl(unix.PR_SET_TIMERSLACK, 1000, 0, 0, 0)
	if realtime {
		// Real-time priority: on a busy machine an ordinary thread waits
		// milliseconds for a core, which is the whole delay error.
		// Best effort: without the privilege it stays an ordinary thread.
		unix.SchedSetAttr(0, &unix.SchedAttr{Size: unix.SizeofSchedAttr, Policy: 1 /* SCHED_FIFO */, Priority: uint32(priority)}, 0)
	}
}

func (d *direction) writeLoop() {
	ownThread(writerPriority, d.realtime)
	batch := make([]*packet, 0, maxCoalesced)
	frames := make([][]byte, 0, maxCoalesced)
	burst := make([]byte, maxFrame)
	var held *packet // taken from the line but not yet due
	for {
		p := held
		held = nil
		if p == nil {
			var open bool
			if p, open = <-d.line; !open {
				return
			}
		}
		d.waitUntil(p.due)
		// Whatever else is due by now goes out with it, merged where it can
		// be (see coalesce): a writer that fell behind catches up in bursts.
		batch = append(batch[:0], p)
	gather:
		for len(batch) < maxCoalesced {
			select {
			case q := <-d.line:
				if q.due-d.clock() > int64(d.early) {
					held = q
					break gather
				}
				batch = append(batch, q)
			default:
				break gather
			}
		}
		frames = frames[:0]
		for _, q := range batch {
			frames = append(frames, q.buf[:q.n])
		}
		d.sendBatch(batch, frames, burst)
		for _, q := range batch {
			d.pools.put(q)
		}
		d.pending.Add(-int64(len(batch)))
	}
}

// sendBatch writes packets (frames are their bytes), merging runs of one
// UDP flow into bursts built in burst.
func (d *direction) sendBatch(batch []*packet, frames [][]byte, burst []byte) {
	for i := 0; i < len(batch); {
		n, used := coalesce(burst, frames[i:])
		now := d.clock()
		segments, wireBytes := 0, 0
		for _, p := range batch[i : i+used] {
			d.stats.DelayError.Add(now - p.due)
			segments += p.segments
			wireBytes += p.wireBytes
		}
		if n > 0 {
			d.stats.BurstsOut.Add(1)
			d.send(burst[:n], segments, wireBytes)
		} else {
			d.send(frames[i], segments, wireBytes)
		}
		i += used
	}
}

func (d *direction) send(frame []byte, segments, wireBytes int) {
	for {
		_, err := rawWrite(d.out, frame)
		if err == nil {
			d.stats.PacketsOut.Add(uint64(segments))
			d.stats.BytesOut.Add(uint64(wireBytes))
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

// waitUntil returns when due is at most `early` ahead. Long waits sleep
// until `spin` before and spin the rest, because wake-ups from a long
// sleep (a core gone idle) come tens of microseconds late; short waits just
// sleep, since spinning through every gap of dense traffic (100,000
// packets/s are 10 us apart) kept a core busy and a real-time thread that
// never sleeps is throttled by the kernel for milliseconds at a time.
// Sending up to `early` ahead lets the writer pass such traffic in small
// batches.
func (p *pacer) waitUntil(due int64) {
	for {
		left := due - p.clock()
		switch {
		case left <= int64(p.early):
			return
		case left > 2*int64(p.spin):
			ts := unix.NsecToTimespec(left - int64(p.spin))
			rawNanosleep(&ts) // EINTR just means another round
		case left <= int64(p.spin):
			ts := unix.NsecToTimespec(left - int64(p.early))
			rawNanosleep(&ts)
			return
		}
	}
}

// The threads that move packets make their system calls without telling
// the Go scheduler (RawSyscall): each owns its thread and a P of its own
// (runRelay raises GOMAXPROCS), so nothing is lost, while the ordinary
// path (entersyscall/exitsyscall) made a real-time reader back from read()
// spin until sysmon, an ordinary thread that may be waiting for the very
// same core, let go of the goroutine's status: stalls of up to a second
// with linkem pinned to one core. The price: a stop-the-world waits until
// every such thread is back from its call, so linkem must never stop the
// world once relaying (no garbage collection, see runRelay).

func rawRead(fd int, b []byte) (int, error) {
	n, _, errno := unix.RawSyscall(unix.SYS_READ, uintptr(fd), uintptr(unsafe.Pointer(&b[0])), uintptr(len(b)))
	if errno != 0 {
		return 0, errno
	}
	return int(n), nil
}

func rawWrite(fd int, b []byte) (int, error) {
	n, _, errno := unix.RawSyscall(unix.SYS_WRITE, uintptr(fd), uintptr(unsafe.Pointer(&b[0])), uintptr(len(b)))
	if errno != 0 {
		return 0, errno
	}
	return int(n), nil
}

func rawNanosleep(ts *unix.Timespec) {
	unix.RawSyscall(unix.SYS_NANOSLEEP, uintptr(unsafe.Pointer(ts)), 0, 0)
}

// waitReadable blocks until fd (non-blocking) has a packet. Unlike a
// blocking read(), which the kernel restarts after a signal, ppoll returns
// on one, so a stop-the-world (should the garbage collector ever run, see
// runRelay) never waits for traffic on an idle direction.
func waitReadable(fd int) {
	fds := []unix.PollFd{{Fd: int32(fd), Events: unix.POLLIN}}
	unix.RawSyscall6(unix.SYS_PPOLL, uintptr(unsafe.Pointer(&fds[0])), 1, 0, 0, 0, 0)
}
