// qgstream is quic-go's stream client (tparams/workloads.py's stream): one
// "GET /<size>?bitrate=<bits/s>" (bulk.Request) that the server paces, read to
// its end. It does not play the stream: it prints the replay protocol's JSON
// line with the bitrate and every read's arrival, [seconds since the request,
// bytes], under "arrivals", and qreplay plays them with the one player rule
// (tparams.workloads.Player, in the stack's parse_client_output). It exits 1
// unless every byte came.
//
//	qgstream ip:port --size=N --bitrate=N [--timeout-s=S] [options of bulk.Flags]
package main

import (
	"encoding/json"
	"fmt"
	"io"
	"os"
	"time"

	"quictp/lab/servers/golab"
	"quictp/replay/quicgo/bulk"
)

func main() {
	fs, client := bulk.ClientFlags("qgstream")
	bitrate := fs.Uint64("bitrate", 0, "bits per second a stream is paced at by the server and played at (required)")
	addr := client.Parse(fs, os.Args[1:], "bitrate")
	if *bitrate == 0 {
		golab.Refuse("--bitrate takes a number of bits per second above 0")
	}
	size := client.Size

	ctx, cancel, conn, handshake := client.Dial(addr)
	defer cancel()
	stream, err := conn.OpenStreamSync(ctx)
	if err != nil {
		client.Fail(ctx, "open stream", err)
	}
	sent := time.Now()
	if _, err := stream.Write(bulk.Request(bulk.Get, size, *bitrate)); err != nil {
		client.Fail(ctx, "request", err)
	}
	stream.Close()
	arrivals, received, buf := make([][2]float64, 0, 1024), uint64(0), make([]byte, 1<<16)
	for {
		n, err := stream.Read(buf)
		if n > 0 {
			arrivals = append(arrivals, [2]float64{time.Since(sent).Seconds(), float64(n)})
			received += uint64(n)
		}
		if err == io.EOF {
			break
		}
		if err != nil {
			client.Fail(ctx, "stream", err)
		}
	}
	finished := time.Since(sent).Seconds()
	conn.CloseWithError(0, "done")
	if received != size {
		client.Fail(ctx, "stream", fmt.Errorf("a stream of %d bytes moved %d", size, received))
	}
	ttfb := finished // (a stream of no bytes)
	if len(arrivals) > 0 {
		ttfb = arrivals[0][0]
	}
	json.NewEncoder(os.Stdout).Encode(map[string]any{
		"bytes": received, "duration_s": finished, "handshake_s": handshake.Seconds(), "requests": 1,
		"ttfb_s": ttfb, "latencies_s": []float64{finished}, "timing": "request to last byte (client)",
		"bitrate": *bitrate, "arrivals": arrivals,
	})
}
