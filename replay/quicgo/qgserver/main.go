// qgserver answers the requests of the replay protocol (bulk.ReadRequest) of any
// qreplay client (qgserver ip:port --cert=C --key=K [options of bulk.Flags]),
// each stream on its own: "GET /<size>" with that many bytes, "PUT /<size>" and
// its body with the number of body bytes read, in decimal, "GET
// /<size>?bitrate=<bits/s>" (a stream) with that many bytes paced at that
// bitrate (sendAtBitrate). When a connection
// ends it prints one JSON line with the sender's view of it (packets sent and
// declared lost, RTT, congestion window): losses the link did not cause, such
// as a receiver dropping packets it cannot process in time, show only here.
package main

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strconv"
	"sync"
	"syscall"
	"time"

	"github.com/quic-go/quic-go"
	"quictp/replay/quicgo/bulk"
)

func main() {
	fs, options := bulk.Flags("qgserver", false)
	certFile := fs.String("cert", "", "PEM certificate chain")
	keyFile := fs.String("key", "", "PEM private key")
	addr := options.Parse(fs, os.Args[1:], "cert", "key")

	tlsConf, err := options.ServerTLS(*certFile, *keyFile)
	if err != nil {
		fail("certificate", err)
	}
	listener, err := quic.ListenAddr(addr, tlsConf, options.Config())
	if err != nil {
		fail("listen", err)
	}
	go func() {
		// qreplay stops the server with SIGTERM once the client is done; a connection whose
		// close has not arrived by then is reported here, so no run loses its report.
		stop := make(chan os.Signal, 1)
		signal.Notify(stop, syscall.SIGTERM, syscall.SIGINT)
		<-stop
		live.Range(func(conn, _ any) bool {
			finish(conn.(*quic.Conn))
			return true
		})
		stdoutMu.Lock() // a report being written by a connection's own goroutine is finished first
		os.Exit(0)
	}()
	for {
		conn, err := listener.Accept(context.Background())
		if err != nil {
			fail("accept", err)
		}
		go serve(conn)
	}
}

var (
	live     sync.Map   // connections not yet reported
	stdoutMu sync.Mutex // connections end concurrently; one report line each
	stdout   = json.NewEncoder(os.Stdout)
)

func serve(conn *quic.Conn) {
	live.Store(conn, nil)
	for {
		stream, err := conn.AcceptStream(context.Background())
		if err != nil {
			finish(conn)
			return
		}
		go answer(stream)
	}
}

// answer serves one request: a GET's bytes, or a PUT's count once its body has ended.
func answer(stream *quic.Stream) {
	defer stream.Close()
	request := bufio.NewReaderSize(stream, 1<<16)
	method, remaining, bitrate, err := bulk.ReadRequest(request)
	if err != nil {
		stream.CancelWrite(0)
		return
	}
	if method == bulk.Put {
		received, err := io.CopyBuffer(io.Discard, request, make([]byte, 1<<16))
		if err != nil {
			stream.CancelWrite(0)
			return
		}
		stream.Write([]byte(strconv.FormatInt(received, 10)))
		return
	}
	if bitrate > 0 {
		sendAtBitrate(stream, remaining, bitrate)
		return
	}
	chunk := make([]byte, 1<<16)
	for remaining > 0 {
		n := min(remaining, uint64(len(chunk)))
		if _, err := stream.Write(chunk[:n]); err != nil {
			return
		}
		remaining -= n
	}
}

// sendAtBitrate writes size bytes paced at bitrate bits/s by the rule of
// bulk.PacingTick: every tick, what the bitrate allows since the first byte
// (to the tick's end), whatever the link would take. A write the connection
// cannot take yet blocks; the next one catches up on the clock, so what the link
// cannot carry waits in the sender, as a live source's would.
func sendAtBitrate(stream *quic.Stream, size, bitrate uint64) {
	chunk := make([]byte, 1<<16)
	started, sent := time.Now(), uint64(0)
	for sent < size {
		due := min(size, uint64((time.Since(started)+bulk.PacingTick).Seconds()*float64(bitrate)/8))
		for sent < due {
			n := min(due-sent, uint64(len(chunk)))
			if _, err := stream.Write(chunk[:n]); err != nil {
				return
			}
			sent += n
		}
		if sent < size { // the FIN goes with the last bytes, not a tick after them
			time.Sleep(bulk.PacingTick)
		}
	}
}

// finish prints the sender's statistics of a connection once, named as qreplay stores them.
func finish(conn *quic.Conn) {
	if _, ok := live.LoadAndDelete(conn); !ok {
		return
	}
	stats := conn.ConnectionStats()
	stdoutMu.Lock()
	defer stdoutMu.Unlock()
	stdout.Encode(map[string]any{
		"sender_packets_sent": stats.PacketsSent, "sender_packets_lost": stats.PacketsLost,
		"sender_bytes_lost": stats.BytesLost, "sender_min_rtt_ms": stats.MinRTT.Seconds() * 1000,
		"sender_smoothed_rtt_ms":   stats.SmoothedRTT.Seconds() * 1000,
		"sender_congestion_window": stats.CongestionWindow,
	})
}

func fail(what string, err error) {
	fmt.Fprintf(os.Stderr, "qgserver: %s: %v\n", what, err)
	os.Exit(1)
}
