// The lab's server of Go's own QUIC, golang.org/x/net/quic (module of go.mod):
// accepts h3 handshakes and holds each connection until the client leaves. It
// shares crypto/tls with quic-go; its connection IDs are always 8 bytes and it
// has no datagrams or migration settings.
package main

import (
	"context"
	"time"

	"golang.org/x/net/quic"

	"quictp/lab/servers/golab"
)

func main() {
	a := golab.Parse("x/net/quic", "retry")
	config := &quic.Config{TLSConfig: a.TLS(), RequireAddressValidation: a.Retry}
	if a.MaxIdleTimeout >= 0 {
		config.MaxIdleTimeout = time.Duration(a.MaxIdleTimeout) * time.Millisecond
		if a.MaxIdleTimeout == 0 {
			config.MaxIdleTimeout = -1 // x/net/quic's "no idle timeout"
		}
	}
	// One read buffer per stream and one per connection: the windows it advertises.
	for _, window := range []int64{a.InitialMaxStreamDataBidiLocal, a.InitialMaxStreamDataBidiRemote, a.InitialMaxStreamDataUni} {
		if window >= 0 {
			config.MaxStreamReadBufferSize = window
		}
	}
	if a.InitialMaxData >= 0 {
		config.MaxConnReadBufferSize = a.InitialMaxData
	}
	if a.InitialMaxStreamsBidi >= 0 {
		config.MaxBidiRemoteStreams = a.InitialMaxStreamsBidi
	}
	if a.InitialMaxStreamsUni >= 0 {
		config.MaxUniRemoteStreams = a.InitialMaxStreamsUni
	}
	endpoint, err := quic.Listen("udp", a.Listen, config)
	if err != nil {
		golab.Refuse(err.Error())
	}
	golab.Serve(endpoint.Accept, func(conn *quic.Conn) { conn.Wait(context.Background()) })
}
