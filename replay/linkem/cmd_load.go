package main

import (
	"encoding/binary"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"net/netip"
	"os"
	"runtime"
	"slices"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"
)

// blast and sink measure linkem end to end at rates iperf3 cannot offer:
// blast sends paced, numbered datagrams stamped with CLOCK_REALTIME inside
// the payload (sendmmsg, a few per system call), sink takes the kernel's
// receive time stamp of each (SO_TIMESTAMPNS, same clock) so the one-way
// latency excludes the sink's own scheduling.

const loadHeader = 16 // sequence number, send time (ns, CLOCK_REALTIME)

func runBlast(args []string) error {
	fs := flag.NewFlagSet("linkem blast", flag.ContinueOnError)
	target := fs.String("target", "", "sink UDP address (IPv4:port)")
	pps := fs.Int("pps", 100000, "datagrams per second offered")
	size := fs.Int("size", 64, "UDP payload bytes (>= 16)")
	seconds := fs.Duration("duration", 4*time.Second, "how long to send")
	batch := fs.Int("batch", 4, "datagrams per sendmmsg call (each stamped just before the call)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	dst, err := netip.ParseAddrPort(*target)
	if err != nil || !dst.Addr().Is4() || *size < loadHeader || *pps < 1 || *batch < 1 {
		return fmt.Errorf("--target IPv4:PORT is required, --size >= %d, --pps and --batch >= 1", loadHeader)
	}
	fd, err := unix.Socket(unix.AF_INET, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return err
	}
	defer unix.Close(fd)
	if err := unix.Connect(fd, &unix.SockaddrInet4{Port: int(dst.Port()), Addr: dst.Addr().As4()}); err != nil {
		return err
	}
	// Pacing needs a thread of its own with a fine timer slack, as linkem's
	// writers. Not real-time: with linkem's threads real-time too, the
	// ordinary threads starve on both cores and the kernel's 50 ms slices
	// for them stall linkem. So the end-to-end figure includes the time a
	// sender waits for a core between its time stamp and its send; the
	// same sender over a plain veth shows how much that is.
	runtime.LockOSThread()
	unix.Prctl(unix.PR_SET_TIMERSLACK, 1000, 0, 0, 0)
	bufs := make([][]byte, *batch)
	iovs := make([]unix.Iovec, *batch)
	msgs := make([]unix.Mmsghdr, *batch)
	for i := range bufs {
		bufs[i] = make([]byte, *size)
		iovs[i].Base = &bufs[i][0]
		iovs[i].SetLen(*size)
		msgs[i].Hdr.Iov = &iovs[i]
		msgs[i].Hdr.SetIovlen(1)
	}
	gap := time.Second / time.Duration(*pps)
	start := time.Now()
	end := start.Add(*seconds)
	var seq, refused uint64
	next := start
	for now := start; now.Before(end); now = time.Now() {
		// Catch up after a late wake-up instead of lowering the offered rate.
		due := min(int(now.Sub(next)/gap)+1, *batch)
		for i := 0; i < due; i++ {
			binary.BigEndian.PutUint64(bufs[i][0:8], seq+uint64(i))
			binary.BigEndian.PutUint64(bufs[i][8:16], uint64(realtimeNs()))
		}
		sent, err := sendmmsg(fd, msgs[:due])
		if err != nil && !errors.Is(err, unix.EINTR) && !errors.Is(err, unix.EAGAIN) && !errors.Is(err, unix.ENOBUFS) {
			return fmt.Errorf("sendmmsg: %w", err)
		}
		refused += uint64(due - sent)
		seq += uint64(due)
		next = next.Add(time.Duration(due) * gap)
		if wait := time.Until(next); wait > 0 {
			ts := unix.NsecToTimespec(int64(wait))
			unix.Nanosleep(&ts, nil)
		}
	}
	elapsed := time.Since(start).Seconds()
	return json.NewEncoder(os.Stdout).Encode(map[string]any{
		"sent": seq - refused, "refused": refused, "seconds": elapsed, "offered_pps": float64(seq) / elapsed})
}

func sendmmsg(fd int, msgs []unix.Mmsghdr) (int, error) {
	n, _, errno := unix.Syscall6(unix.SYS_SENDMMSG, uintptr(fd), uintptr(unsafe.Pointer(&msgs[0])),
		uintptr(len(msgs)), 0, 0, 0)
	if errno != 0 {
		return 0, errno
	}
	return int(n), nil
}

func realtimeNs() int64 {
	var ts unix.Timespec
	unix.ClockGettime(unix.CLOCK_REALTIME, &ts)
	return ts.Nano()
}

func runSink(args []string) error {
	fs := flag.NewFlagSet("linkem sink", flag.ContinueOnError)
	listen := fs.String("listen", "", "UDP address to receive on (IPv4:port)")
	delay := fs.Duration("delay", 0, "configured one-way delay, subtracted to give the error")
	idle := fs.Duration("idle", time.Second, "stop this long after the last datagram")
	if err := fs.Parse(args); err != nil {
		return err
	}
	at, err := netip.ParseAddrPort(*listen)
	if err != nil || !at.Addr().Is4() {
		return fmt.Errorf("--listen IPv4:PORT is required")
	}
	fd, err := unix.Socket(unix.AF_INET, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return err
	}
	defer unix.Close(fd)
	unix.SetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_RCVBUFFORCE, 64<<20) // room for seconds of 100,000 small datagrams
	if err := unix.SetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_TIMESTAMPNS, 1); err != nil {
		return err
	}
	if err := unix.Bind(fd, &unix.SockaddrInet4{Port: int(at.Port()), Addr: at.Addr().As4()}); err != nil {
		return err
	}
	tv := unix.NsecToTimeval(int64(*idle))
	unix.SetsockoptTimeval(fd, unix.SOL_SOCKET, unix.SO_RCVTIMEO, &tv)
	fmt.Fprintln(os.Stderr, "linkem sink: listening") // tells the caller it may start sending
	buf := make([]byte, 65536)
	oob := make([]byte, 128)
	latencies := make([]int64, 0, 1<<20)
	var maxSeq uint64
	var first, last int64
	var bytes uint64
	for {
		n, oobn, _, _, err := unix.Recvmsg(fd, buf, oob, 0)
		if err != nil {
			if errors.Is(err, unix.EINTR) {
				continue
			}
			if errors.Is(err, unix.EAGAIN) && len(latencies) > 0 {
				break
			}
			if errors.Is(err, unix.EAGAIN) {
				continue // nothing yet: keep waiting for the sender
			}
			return err
		}
		if n < loadHeader {
			continue
		}
		rx := kernelStamp(oob[:oobn])
		if rx == 0 {
			rx = realtimeNs()
		}
		if len(latencies) == 0 {
			first = rx
		}
		last = rx
		bytes += uint64(n)
		seq := binary.BigEndian.Uint64(buf[0:8])
		maxSeq = max(maxSeq, seq)
		latencies = append(latencies, rx-int64(binary.BigEndian.Uint64(buf[8:16])))
	}
	slices.Sort(latencies)
	q := func(p float64) float64 { return float64(latencies[int(p*float64(len(latencies)-1))]) / 1e6 }
	errQ := func(p float64) float64 { return q(p) - float64(*delay)/1e6 }
	span := float64(last-first) / 1e9
	return json.NewEncoder(os.Stdout).Encode(map[string]any{
		"received": len(latencies), "highest_seq": maxSeq, "lost": int64(maxSeq+1) - int64(len(latencies)),
		"received_pps": float64(len(latencies)-1) / max(span, 1e-9), "goodput_bps": float64(bytes) * 8 / max(span, 1e-9),
		"latency_p50_ms": q(0.5), "latency_p99_ms": q(0.99), "latency_max_ms": q(1),
		"error_p50_ms": errQ(0.5), "error_p99_ms": errQ(0.99), "error_max_ms": errQ(1)})
}

// kernelStamp is the SO_TIMESTAMPNS receive time in a control message, 0 if absent.
func kernelStamp(oob []byte) int64 {
	msgs, err := unix.ParseSocketControlMessage(oob)
	if err != nil {
		return 0
	}
	for _, m := range msgs {
		if m.Header.Level == unix.SOL_SOCKET && m.Header.Type == unix.SO_TIMESTAMPNS && len(m.Data) >= 16 {
			ts := (*unix.Timespec)(unsafe.Pointer(&m.Data[0]))
			return ts.Nano()
		}
	}
	return 0
}
