// The lab's quic-go server (the quic-go module of go.mod): accepts h3
// handshakes and holds each connection until the client leaves. Caddy runs an
// older quic-go; this one takes the application's choices.
package main

import (
	"net"
	"time"

	"github.com/quic-go/quic-go"

	"quictp/lab/servers/golab"
)

func main() {
	a := golab.Parse("quic-go", "cid-length", "datagrams", "retry")
	config := &quic.Config{}
	if a.MaxIdleTimeout >= 0 {
		config.MaxIdleTimeout = time.Duration(a.MaxIdleTimeout) * time.Millisecond
	}
	if a.InitialMaxData >= 0 {
		config.InitialConnectionReceiveWindow = uint64(a.InitialMaxData)
	}
	// quic-go has one initial window for every stream.
	for _, window := range []int64{a.InitialMaxStreamDataBidiLocal, a.InitialMaxStreamDataBidiRemote, a.InitialMaxStreamDataUni} {
		if window >= 0 {
			config.InitialStreamReceiveWindow = uint64(window)
		}
	}
	if a.InitialMaxStreamsBidi >= 0 {
		config.MaxIncomingStreams = a.InitialMaxStreamsBidi
	}
	if a.InitialMaxStreamsUni >= 0 {
		config.MaxIncomingUniStreams = a.InitialMaxStreamsUni
	}
	if a.Datagrams != nil {
		config.EnableDatagrams = *a.Datagrams
	}
	address, err := net.ResolveUDPAddr("udp", a.Listen)
	if err != nil {
		golab.Refuse(err.Error())
	}
	socket, err := net.ListenUDP("udp", address)
	if err != nil {
		golab.Refuse(err.Error())
	}
	transport := &quic.Transport{Conn: socket}
	if a.CIDLength >= 0 {
		transport.ConnectionIDLength = a.CIDLength
	}
	if a.Retry {
		transport.VerifySourceAddress = func(net.Addr) bool { return true }
	}
	listener, err := transport.Listen(a.TLS(), config)
	if err != nil {
		golab.Refuse(err.Error())
	}
	golab.Serve(listener.Accept, func(conn *quic.Conn) { <-conn.Context().Done() })
}
