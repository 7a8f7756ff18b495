// qgserver answers qgclient's download requests: for each stream it reads
// an 8-byte big-endian size and sends that many bytes.
package main

import (
	"context"
	"crypto/tls"
	"encoding/binary"
	"flag"
	"fmt"
	"io"
	"os"

	"github.com/quic-go/quic-go"
	"quictp/replay/quicgo/bulk"
)

func main() {
	fs := flag.NewFlagSet("qgserver", flag.ExitOnError)
	params := bulk.RegisterFlags(fs, "initial_max_stream_data_bidi_remote")
	addr := fs.String("addr", "0.0.0.0:4433", "UDP address to listen on")
	certFile := fs.String("cert", "cert.pem", "certificate (PEM)")
	keyFile := fs.String("key", "key.pem", "private key (PEM)")
	fs.Parse(os.Args[1:])

	cert, err := tls.LoadX509KeyPair(*certFile, *keyFile)
	if err != nil {
		fail("certificate", err)
	}
	tlsConf := &tls.Config{Certificates: []tls.Certificate{cert}, NextProtos: []string{bulk.ALPN}}
	listener, err := quic.ListenAddr(*addr, tlsConf, params.Config())
	if err != nil {
		fail("listen", err)
	}
	for {
		conn, err := listener.Accept(context.Background())
		if err != nil {
			fail("accept", err)
		}
		go serve(conn)
	}
}

func serve(conn *quic.Conn) {
	for {
		stream, err := conn.AcceptStream(context.Background())
		if err != nil {
			return
		}
		go func() {
			defer stream.Close()
			var header [8]byte
			if _, err := io.ReadFull(stream, header[:]); err != nil {
				return
			}
			remaining := binary.BigEndian.Uint64(header[:])
			chunk := make([]byte, 1<<16)
			for remaining > 0 {
				n := uint64(len(chunk))
				if remaining < n {
					n = remaining
				}
				if _, err := stream.Write(chunk[:n]); err != nil {
					return
				}
				remaining -= n
			}
		}()
	}
}

func fail(what string, err error) {
	fmt.Fprintf(os.Stderr, "qgserver: %s: %v\n", what, err)
	os.Exit(1)
}
