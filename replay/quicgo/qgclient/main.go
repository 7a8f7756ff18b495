// qgclient makes --requests requests of the replay protocol (bulk.Request) to any
// qreplay server on one QUIC connection, each on a stream of its own and at most
// --concurrency at once: GETs of --size bytes (--direction=down, the default) or
// PUTs of as many (--direction=up). It prints one JSON line (tparams/workloads.py):
// bytes moved, the time from the first request to the last response, the
// handshake's, the requests completed, the first request's time to first byte and
// each request's latency; it exits 1 unless every request moved all its bytes.
//
//	qgclient ip:port --size=N [--direction=down|up] [--requests=N] [--concurrency=N]
//	         [--timeout-s=S] [options of bulk.Flags]
package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"slices"
	"strconv"
	"time"

	"github.com/quic-go/quic-go"
	"quictp/lab/servers/golab"
	"quictp/replay/quicgo/bulk"
)

func main() {
	fs, client := bulk.ClientFlags("qgclient")
	direction := fs.String("direction", "down", "down: GET, the server sends; up: PUT, the client sends")
	requests := fs.Int("requests", 1, "requests on the one connection, each of --size bytes")
	concurrency := fs.Int("concurrency", 1, "requests open at once, each on its own stream")
	addr := client.Parse(fs, os.Args[1:])
	method, ok := map[string]string{"down": bulk.Get, "up": bulk.Put}[*direction]
	if !ok {
		golab.Refuse("--direction takes down or up, not " + strconv.Quote(*direction))
	}
	if *requests < 1 || *concurrency < 1 {
		golab.Refuse("--requests and --concurrency take a number of at least 1")
	}

	ctx, cancel, conn, handshake := client.Dial(addr)
	defer cancel()
	fail = client.Fail

	// Each request holds a slot from before its stream is opened until its response has ended;
	// OpenStreamSync waits for the server's stream credit when the slots outnumber it.
	slots := make(chan struct{}, *concurrency)
	done := make(chan exchange, *requests)
	for range *requests {
		slots <- struct{}{}
		stream, err := conn.OpenStreamSync(ctx)
		if err != nil {
			fail(ctx, "open stream", err)
		}
		go func() {
			defer func() { <-slots }()
			done <- request(ctx, stream, method, client.Size)
		}()
	}
	exchanges := make([]exchange, 0, *requests)
	for range *requests {
		exchanges = append(exchanges, <-done)
	}
	conn.CloseWithError(0, "done")

	first := slices.MinFunc(exchanges, func(a, b exchange) int { return a.sent.Compare(b.sent) })
	slices.SortFunc(exchanges, func(a, b exchange) int { return a.finished.Compare(b.finished) })
	moved, latencies := uint64(0), make([]float64, 0, len(exchanges))
	for _, e := range exchanges {
		moved += e.moved
		latencies = append(latencies, e.finished.Sub(e.sent).Seconds())
	}
	json.NewEncoder(os.Stdout).Encode(map[string]any{
		"bytes": moved, "duration_s": exchanges[len(exchanges)-1].finished.Sub(first.sent).Seconds(),
		"handshake_s": handshake.Seconds(), "requests": len(exchanges),
		"ttfb_s": first.firstByte.Sub(first.sent).Seconds(), "latencies_s": latencies,
		"timing": "request to last byte (client)",
	})
}

// exchange is one request's times and the payload it moved.
type exchange struct {
	sent, firstByte, finished time.Time
	moved                     uint64
}

// request makes one request on its stream and reads the response to its end; a
// request that does not move all its bytes ends the client.
func request(ctx context.Context, stream *quic.Stream, method string, size uint64) exchange {
	e := exchange{sent: time.Now()}
	if _, err := stream.Write(bulk.Request(method, size, 0)); err != nil {
		fail(ctx, "request", err)
	}
	if method == bulk.Put {
		chunk := make([]byte, 1<<16)
		for remaining := size; remaining > 0; {
			n := min(remaining, uint64(len(chunk)))
			if _, err := stream.Write(chunk[:n]); err != nil {
				fail(ctx, "upload", err)
			}
			remaining -= n
		}
	}
	stream.Close()
	response := firstByte{Reader: stream, at: &e.firstByte}
	if method == bulk.Get {
		received, err := io.CopyBuffer(io.Discard, &response, make([]byte, 1<<20))
		if err != nil {
			fail(ctx, "download", err)
		}
		e.moved = uint64(received)
	} else {
		count, err := io.ReadAll(io.LimitReader(&response, 32))
		if err != nil {
			fail(ctx, "upload", err)
		}
		if e.moved, err = strconv.ParseUint(string(count), 10, 64); err != nil {
			fail(ctx, "upload", fmt.Errorf("the server's answer is no count of bytes: %q", count))
		}
	}
	e.finished = time.Now()
	if e.moved != size {
		fail(ctx, "request", fmt.Errorf("%s of %d bytes moved %d", method, size, e.moved))
	}
	return e
}

// firstByte notes when its reader first returns data.
type firstByte struct {
	io.Reader
	at *time.Time
}

func (f *firstByte) Read(p []byte) (int, error) {
	n, err := f.Reader.Read(p)
	if n > 0 && f.at.IsZero() {
		*f.at = time.Now()
	}
	return n, err
}

// fail ends the client in one line (bulk.Client.Fail).
var fail func(ctx context.Context, what string, err error)
