// qgclient downloads --size bytes from any qreplay server over one QUIC stream and
// prints one JSON line: bytes received and the time from request to last byte.
//
//	qgclient ip:port --size=N [--timeout-s=S] [options of bulk.RegisterFlags]
package main

import (
	"context"
	"crypto/tls"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"os"
	"time"

	"github.com/quic-go/quic-go"
	"quictp/replay/quicgo/bulk"
)

func main() {
	fs := flag.NewFlagSet("qgclient", flag.ContinueOnError)
	options := bulk.RegisterFlags(fs, true)
	size := fs.Uint64("size", 0, "bytes to download")
	timeout := fs.Float64("timeout-s", 600, "give up (exit 1) after this many seconds")
	addr := options.Parse(fs, os.Args[1:], "size")

	ctx, cancel := context.WithTimeout(context.Background(), time.Duration(*timeout*float64(time.Second)))
	defer cancel()
	start := time.Now()
	tlsConf := options.TLS(&tls.Config{InsecureSkipVerify: true, NextProtos: []string{bulk.ALPN}}) // lab server, throw-away cert
	conn, err := quic.DialAddr(ctx, addr, tlsConf, options.Config())
	if err != nil {
		fail("dial", err)
	}
	handshake := time.Since(start)
	stream, err := conn.OpenStreamSync(ctx)
	if err != nil {
		fail("open stream", err)
	}
	request := time.Now()
	if _, err := stream.Write(bulk.Request(*size)); err != nil {
		fail("request", err)
	}
	stream.Close()
	received, err := io.CopyBuffer(io.Discard, stream, make([]byte, 1<<20))
	duration := time.Since(request)
	conn.CloseWithError(0, "done")
	if err != nil {
		fail("download", err)
	}
	if uint64(received) != *size {
		fail("download", fmt.Errorf("received %d of %d bytes", received, *size))
	}
	json.NewEncoder(os.Stdout).Encode(map[string]any{
		"bytes": received, "duration_s": duration.Seconds(), "handshake_s": handshake.Seconds(),
		"timing": "request to last byte (client)",
	})
}

func fail(what string, err error) {
	fmt.Fprintf(os.Stderr, "qgclient: %s: %v\n", what, err)
	os.Exit(1)
}
