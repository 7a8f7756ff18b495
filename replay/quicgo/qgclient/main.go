// qgclient downloads -size bytes from qgserver over one QUIC stream and
// prints one JSON line: bytes received and the time from request to last byte.
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
	fs := flag.NewFlagSet("qgclient", flag.ExitOnError)
	params := bulk.RegisterFlags(fs, "initial_max_stream_data_bidi_local")
	addr := fs.String("addr", "127.0.0.1:4433", "server address host:port")
	size := fs.Uint64("size", 1<<20, "bytes to download")
	timeout := fs.Duration("timeout", 10*time.Minute, "give up after this long")
	keylog := fs.String("keylog", "", "append the TLS secrets (NSS key log format) to this file")
	fs.Parse(os.Args[1:])

	ctx, cancel := context.WithTimeout(context.Background(), *timeout)
	defer cancel()
	start := time.Now()
	tlsConf := &tls.Config{InsecureSkipVerify: true, NextProtos: []string{bulk.ALPN}} // lab server, throw-away cert
	if *keylog != "" {
		file, err := os.OpenFile(*keylog, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
		if err != nil {
			fail("key log", err)
		}
		defer file.Close()
		tlsConf.KeyLogWriter = file
	}
	conn, err := quic.DialAddr(ctx, *addr, tlsConf, params.Config())
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
