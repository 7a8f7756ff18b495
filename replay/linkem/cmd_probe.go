package main

import (
	"encoding/binary"
	"encoding/json"
	"flag"
	"fmt"
	"net"
	"os"
	"slices"
	"time"
)

// runEcho answers every UDP datagram with itself: the far end of `ping`.
func runEcho(args []string) error {
	fs := flag.NewFlagSet("linkem echo", flag.ContinueOnError)
	listen := fs.String("listen", ":7007", "UDP address to echo on")
	if err := fs.Parse(args); err != nil {
		return err
	}
	conn, err := net.ListenPacket("udp", *listen)
	if err != nil {
		return err
	}
	buf := make([]byte, 65536)
	for {
		n, from, err := conn.ReadFrom(buf)
		if err != nil {
			return err
		}
		conn.WriteTo(buf[:n], from)
	}
}

// runPing sends numbered, timestamped UDP datagrams to an echo server and
// prints RTT quantiles and the loss as JSON. Replies are matched by
// sequence number, so loss and reordering do not confuse the samples.
func runPing(args []string) error {
	fs := flag.NewFlagSet("linkem ping", flag.ContinueOnError)
	target := fs.String("target", "", "echo server UDP address")
	count := fs.Int("count", 200, "datagrams to send")
	interval := fs.Duration("interval", 5*time.Millisecond, "gap between datagrams")
	size := fs.Int("size", 64, "datagram size in bytes (>= 16)")
	wait := fs.Duration("wait", time.Second, "how long to wait for late replies after the last send")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if *target == "" || *size < 16 || *count < 1 {
		return fmt.Errorf("--target is required, --size >= 16, --count >= 1")
	}
	conn, err := net.Dial("udp", *target)
	if err != nil {
		return err
	}
	start := time.Now()
	rtts := make([]float64, 0, *count)
	seen := make([]bool, *count)
	done := make(chan struct{})
	go func() {
		defer close(done)
		buf := make([]byte, 65536)
		for {
			n, err := conn.Read(buf)
			if err != nil {
				return
			}
			if n < 16 {
				continue
			}
			seq := binary.BigEndian.Uint64(buf[0:8])
			sent := int64(binary.BigEndian.Uint64(buf[8:16]))
			if seq >= uint64(*count) || seen[seq] {
				continue
			}
			seen[seq] = true
			rtts = append(rtts, float64(int64(time.Since(start))-sent)/1e6)
		}
	}()
	msg := make([]byte, *size)
	next := time.Now()
	for i := 0; i < *count; i++ {
		binary.BigEndian.PutUint64(msg[0:8], uint64(i))
		binary.BigEndian.PutUint64(msg[8:16], uint64(time.Since(start)))
		conn.Write(msg) // a refused send is a lost sample, counted below
		next = next.Add(*interval)
		time.Sleep(time.Until(next))
	}
	time.Sleep(*wait)
	conn.SetReadDeadline(time.Now())
	<-done
	slices.Sort(rtts)
	q := func(p float64) float64 {
		if len(rtts) == 0 {
			return 0
		}
		return rtts[int(p*float64(len(rtts)-1))]
	}
	var sum float64
	for _, r := range rtts {
		sum += r
	}
	mean := 0.0
	if len(rtts) > 0 {
		mean = sum / float64(len(rtts))
	}
	out := map[string]any{
		"sent": *count, "received": len(rtts),
		"loss_pct":   100 * float64(*count-len(rtts)) / float64(*count),
		"rtt_min_ms": q(0), "rtt_p50_ms": q(0.5), "rtt_mean_ms": mean, "rtt_p99_ms": q(0.99), "rtt_max_ms": q(1),
	}
	return json.NewEncoder(os.Stdout).Encode(out)
}
