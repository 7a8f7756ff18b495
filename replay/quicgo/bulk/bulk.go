// Package bulk holds what qreplay's quic-go client and server share: the
// transport-parameter flags (named as in RFC 9000) and the download protocol
// every qreplay program speaks (lab/servers/common/src/replay.rs): hq-interop,
// the client sending "GET /<size>\r\n" on one stream, the server answering
// with that many bytes and closing the stream.
package bulk

import (
	"bufio"
	"flag"
	"fmt"
	"io"
	"strconv"
	"strings"
	"time"

	"github.com/quic-go/quic-go"
	"github.com/quic-go/quic-go/qlog"
)

// ALPN is the Interop Runner's name for HTTP/0.9 over QUIC.
const ALPN = "hq-interop"

// maxRequest bounds the request line a server reads.
const maxRequest = 64

// Request is the request line for a download of size bytes.
func Request(size uint64) []byte {
	return []byte(fmt.Sprintf("GET /%d\r\n", size))
}

// RequestedSize reads a request line ("GET /<size>", ended by a newline or
// the stream's end) and returns the size it asks for.
func RequestedSize(stream io.Reader) (uint64, error) {
	line, err := bufio.NewReaderSize(io.LimitReader(stream, maxRequest), maxRequest).ReadString('\n')
	if err != nil && err != io.EOF {
		return 0, err
	}
	path, ok := strings.CutPrefix(strings.TrimRight(line, "\r\n"), "GET /")
	if !ok {
		return 0, fmt.Errorf("not a request for /<size>: %q", line)
	}
	return strconv.ParseUint(path, 10, 64)
}

// Ceilings used with -autotune, the same as ngtcp2's client defaults so that
// stacks grow their windows to comparable limits.
const (
	autotuneMaxStreamWindow     = 16 << 20
	autotuneMaxConnectionWindow = 24 << 20
)

// Params are the transport parameters quic-go lets an application choose.
// quic-go advertises one stream window for every stream type, so the side's
// relevant one is given (bidi_local for a client, bidi_remote for a server).
type Params struct {
	MaxIdleTimeoutMs uint64
	InitialMaxData   uint64
	StreamWindow     uint64
	MaxStreamsBidi   int64
	MaxStreamsUni    int64
	Autotune         bool
}

// RegisterFlags declares the parameter flags; streamWindowFlag names the
// stream window flag for the side.
func RegisterFlags(fs *flag.FlagSet, streamWindowFlag string) *Params {
	p := &Params{}
	fs.Uint64Var(&p.MaxIdleTimeoutMs, "max_idle_timeout", 0, "max_idle_timeout in ms (0: quic-go default, 30 s)")
	fs.Uint64Var(&p.InitialMaxData, "initial_max_data", 0, "initial_max_data in bytes (0: quic-go default)")
	fs.Uint64Var(&p.StreamWindow, streamWindowFlag, 0, streamWindowFlag+" in bytes (0: quic-go default); quic-go advertises it for every stream type")
	fs.Int64Var(&p.MaxStreamsBidi, "initial_max_streams_bidi", -1, "initial_max_streams_bidi (-1: quic-go default)")
	fs.Int64Var(&p.MaxStreamsUni, "initial_max_streams_uni", -1, "initial_max_streams_uni (-1: quic-go default)")
	fs.BoolVar(&p.Autotune, "autotune", false, "let flow-control windows grow (default: pinned to the advertised values)")
	return p
}

// Config turns the parameters into a quic-go configuration; QLOGDIR in the
// environment switches qlog on (quic-go's own convention).
func (p *Params) Config() *quic.Config {
	conf := &quic.Config{
		MaxIdleTimeout:                 time.Duration(p.MaxIdleTimeoutMs) * time.Millisecond,
		InitialStreamReceiveWindow:     p.StreamWindow,
		InitialConnectionReceiveWindow: p.InitialMaxData,
		Tracer:                         qlog.DefaultConnectionTracer,
	}
	conf.MaxIncomingStreams = streamsLimit(p.MaxStreamsBidi)
	conf.MaxIncomingUniStreams = streamsLimit(p.MaxStreamsUni)
	if p.Autotune {
		conf.MaxStreamReceiveWindow = max(p.StreamWindow, autotuneMaxStreamWindow)
		conf.MaxConnectionReceiveWindow = max(p.InitialMaxData, autotuneMaxConnectionWindow)
	} else {
		// quic-go grows a window only while it is below its maximum: equal means pinned.
		conf.MaxStreamReceiveWindow = p.StreamWindow
		conf.MaxConnectionReceiveWindow = p.InitialMaxData
	}
	return conf
}

// streamsLimit maps the flag to quic-go's convention (0 = default, negative = none).
func streamsLimit(flagValue int64) int64 {
	switch {
	case flagValue < 0:
		return 0
	case flagValue == 0:
		return -1
	default:
		return flagValue
	}
}
