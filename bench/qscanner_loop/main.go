// qscanner_loop: the handshake loop of QScanner (quic-go), as a speed anchor for
// bench/bench_handshakes.py. Each of -concurrency goroutines dials, completes the
// QUIC handshake, closes with NO_ERROR and dials again until -count handshakes
// have been attempted; the result is one JSON object on stdout.
//
// QScanner dials every target with quic.DialAddr (a fresh UDP socket per
// connection); -shared instead multiplexes all dials over one quic.Transport,
// so the benchmark can report quic-go's better mode.
package main

import (
	"context"
	"crypto/tls"
	"encoding/json"
	"flag"
	"fmt"
	"net"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/quic-go/quic-go"
)

type result struct {
	Completed           int64   `json:"completed"`
	Failed              int64   `json:"failed"`
	Seconds             float64 `json:"seconds"`
	HandshakesPerSecond float64 `json:"handshakes_per_second"`
	Concurrency         int     `json:"concurrency"`
	Shared              bool    `json:"shared"`
	FirstError          string  `json:"first_error,omitempty"`
}

func main() {
	targets := flag.String("target", "127.0.0.1:4433", "server address host:port; several comma-separated are used round-robin")
	count := flag.Int64("count", 2000, "handshakes to attempt")
	concurrency := flag.Int("concurrency", 32, "handshakes in flight")
	timeout := flag.Duration("timeout", 5*time.Second, "per-handshake timeout")
	alpn := flag.String("alpn", "h3", "ALPN offered")
	shared := flag.Bool("shared", false, "one UDP socket (quic.Transport) for all dials instead of one per dial")
	flag.Parse()

	addrs := strings.Split(*targets, ",")
	udpAddrs := make([]*net.UDPAddr, len(addrs))
	for i, a := range addrs {
		u, err := net.ResolveUDPAddr("udp", a)
		if err != nil {
			fmt.Fprintln(os.Stderr, "bad -target:", err)
			os.Exit(2)
		}
		udpAddrs[i] = u
	}
	// Like QScanner: certificates are recorded, not verified.
	tlsConf := &tls.Config{InsecureSkipVerify: true, NextProtos: []string{*alpn}}
	quicConf := &quic.Config{HandshakeIdleTimeout: *timeout}

	var transport *quic.Transport
	if *shared {
		conn, err := net.ListenUDP("udp", nil)
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
		_ = conn.SetReadBuffer(8 << 20)
		transport = &quic.Transport{Conn: conn}
		defer transport.Close()
	}

	var next, completed, failed atomic.Int64
	var firstError atomic.Value
	var wg sync.WaitGroup
	start := time.Now()
	for w := 0; w < *concurrency; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				n := next.Add(1)
				if n > *count {
					return
				}
				addr := udpAddrs[int(n)%len(udpAddrs)]
				ctx, cancel := context.WithTimeout(context.Background(), *timeout)
				var conn *quic.Conn
				var err error
				if transport != nil {
					conn, err = transport.Dial(ctx, addr, tlsConf, quicConf)
				} else {
					conn, err = quic.DialAddr(ctx, addr.String(), tlsConf, quicConf)
				}
				cancel()
				if err != nil {
					failed.Add(1)
					firstError.CompareAndSwap(nil, err.Error())
					continue
				}
				_ = conn.CloseWithError(0, "")
				completed.Add(1)
			}
		}()
	}
	wg.Wait()
	seconds := time.Since(start).Seconds()
	out := result{
		Completed: completed.Load(), Failed: failed.Load(), Seconds: seconds,
		HandshakesPerSecond: float64(completed.Load()) / seconds, Concurrency: *concurrency, Shared: *shared,
	}
	if e, ok := firstError.Load().(string); ok {
		out.FirstError = e
	}
	_ = json.NewEncoder(os.Stdout).Encode(out)
}
