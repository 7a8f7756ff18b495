// Package bulk holds what qreplay's quic-go client and server share: their
// command line (tparams/program_cli.py) and the replay protocol every qreplay
// program speaks (tparams/workloads.py): hq-interop, each request a
// client-opened bidirectional stream of its own; "GET /<size>\r\n" and FIN is
// answered with that many bytes and FIN (a download), "PUT /<size>\r\n", the
// body and FIN with the number of body bytes received, in decimal, and FIN
// (an upload); "GET /<size>?bitrate=<bits/s>\r\n" with that many bytes paced
// at that bitrate (a stream: PacingTick).
package bulk

import (
	"bufio"
	"bytes"
	"context"
	"crypto/tls"
	"flag"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/quic-go/quic-go"
	"github.com/quic-go/quic-go/qlog"

	"quictp/lab/servers/golab"
)

// ALPN is the Interop Runner's name for HTTP/0.9 over QUIC.
const ALPN = "hq-interop"

// maxRequest bounds the request line a server reads.
const maxRequest = 64

// The methods of the replay protocol: a download and an upload.
const (
	Get = "GET"
	Put = "PUT"
)

// PacingTick is how often a stream's server hands over what the bitrate allows
// since the first byte, whatever the link would take: aioquic's server's rule
// (send_at_bitrate in replay/aioquic_endpoints/common.py, PACING_TICK_S), the
// one every pacing server of ours follows.
const PacingTick = 20 * time.Millisecond

// Request is the request line asking to move size bytes: GET for a download, PUT for an upload,
// a GET paced at bitrate bits/s for a stream (bitrate 0: none).
func Request(method string, size, bitrate uint64) []byte {
	if bitrate > 0 {
		return []byte(fmt.Sprintf("%s /%d?bitrate=%d\r\n", method, size, bitrate))
	}
	return []byte(fmt.Sprintf("%s /%d\r\n", method, size))
}

// ReadRequest reads a request line ("GET /<size>", "GET /<size>?bitrate=<bits/s>"
// or "PUT /<size>", ended by a newline or the stream's end) and returns its
// method, size and bitrate (0: not a stream); an upload's body is what the
// reader holds after it.
func ReadRequest(stream *bufio.Reader) (string, uint64, uint64, error) {
	line, err := stream.ReadSlice('\n')
	if len(line) > maxRequest || (err != nil && (err != io.EOF || len(line) == 0)) {
		return "", 0, 0, fmt.Errorf("no request line: %q (%v)", line[:min(len(line), maxRequest)], err)
	}
	method, path, _ := bytes.Cut(bytes.TrimRight(line, "\r\n"), []byte(" /"))
	path, query, paced := bytes.Cut(path, []byte("?"))
	size, err := strconv.ParseUint(string(path), 10, 64)
	if (string(method) != Get && string(method) != Put) || err != nil {
		return "", 0, 0, fmt.Errorf("not a GET or PUT of /<size>: %q", line)
	}
	bitrate := uint64(0)
	if paced {
		digits, ok := strings.CutPrefix(string(query), "bitrate=")
		bitrate, err = strconv.ParseUint(digits, 10, 64)
		if !ok || err != nil || bitrate == 0 || string(method) != Get {
			return "", 0, 0, fmt.Errorf("a bitrate is a GET's, above 0: %q", line)
		}
	}
	return string(method), size, bitrate, nil
}

// Client is a client's command line (ClientFlags): bulk.Flags, --size and --timeout-s, which the
// request and the stream client both take, and the program's name for its one-line failures.
type Client struct {
	Program  string
	Size     uint64
	TimeoutS float64
	options  *Options
}

// ClientFlags declares a client's flags; the program adds its own to the set.
func ClientFlags(program string) (*flag.FlagSet, *Client) {
	fs, options := Flags(program, true)
	c := &Client{Program: program, options: options}
	fs.Uint64Var(&c.Size, "size", 0, "bytes each request moves (a GET's response body, a PUT's body)")
	fs.Float64Var(&c.TimeoutS, "timeout-s", 600, "give up (exit 1) after this many seconds")
	return fs, c
}

// Parse reads the command line (Options.Parse), --size and the required flags named, and returns the address.
func (c *Client) Parse(fs *flag.FlagSet, args []string, required ...string) string {
	return c.options.Parse(fs, args, append(required, "size")...)
}

// Dial connects to addr before --timeout-s, which bounds the transfers too (the
// connection is closed then): the context, its cancel, the connection and the
// handshake's time. A failure ends the client (Fail).
func (c *Client) Dial(addr string) (context.Context, context.CancelFunc, *quic.Conn, time.Duration) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Duration(c.TimeoutS*float64(time.Second)))
	start := time.Now()
	conn, err := quic.DialAddr(ctx, addr, c.options.ClientTLS(), c.options.Config())
	if err != nil {
		c.Fail(ctx, "dial", err)
	}
	context.AfterFunc(ctx, func() { conn.CloseWithError(0, "timeout") })
	return ctx, cancel, conn, time.Since(start)
}

// Fail ends the client in one line, naming the timeout when it was the cause.
func (c *Client) Fail(ctx context.Context, what string, err error) {
	if ctx.Err() == context.DeadlineExceeded {
		err = fmt.Errorf("gave up after --timeout-s: %w", err)
	}
	fmt.Fprintf(os.Stderr, "%s: %s: %v\n", c.Program, what, err)
	os.Exit(1)
}

// Ceilings used with --autotune, the same as ngtcp2's client defaults so that
// stacks grow their windows to comparable limits.
const (
	autotuneMaxStreamWindow     = 16 << 20
	autotuneMaxConnectionWindow = 24 << 20
)

// Options are what both roles take besides their addresses (tparams/program_cli.py,
// as every qreplay program): the twelve transport parameters by name with dashes,
// the knobs (tparams/knobs.py: --cc, --autotune, --cipher, --gso), --keylog and
// --qlog-dir. quic-go lets an application choose
// five of the parameters; it advertises one stream window for every stream type,
// so a side takes the window that governs the download (bidi_local for a client,
// bidi_remote for a server). The rest is refused in one line.
type Options struct {
	MaxIdleTimeoutMs uint64
	InitialMaxData   uint64
	StreamWindow     uint64
	MaxStreamsBidi   int64
	MaxStreamsUni    int64
	Autotune         bool
	CC               string
	GSO              string // "true", "false", or "" for quic-go's own choice (on where the kernel has it)
	Keylog           string
	QlogDir          string
	refused          golab.Refusals // what quic-go cannot honour
}

// Flags is the command line of the client (isClient) or the server named
// program with the options of both roles declared; each adds its own.
func Flags(program string, isClient bool) (*flag.FlagSet, *Options) {
	fs := flag.NewFlagSet(program, flag.ContinueOnError)
	o := &Options{refused: golab.Refusals{}}
	window, other := "initial-max-stream-data-bidi-remote", []string{"initial-max-stream-data-bidi-local"}
	if isClient {
		window, other = other[0], []string{window}
	}
	other = append(other, "initial-max-stream-data-uni")
	fs.Uint64Var(&o.MaxIdleTimeoutMs, "max-idle-timeout", 0, "max_idle_timeout in ms (0: quic-go default, 30 s)")
	fs.Uint64Var(&o.InitialMaxData, "initial-max-data", 0, "initial_max_data in bytes (0: quic-go default)")
	fs.Uint64Var(&o.StreamWindow, window, 0, "in bytes (0: quic-go default); quic-go advertises it for every stream type")
	fs.Int64Var(&o.MaxStreamsBidi, "initial-max-streams-bidi", -1, "initial_max_streams_bidi (-1: quic-go default)")
	fs.Int64Var(&o.MaxStreamsUni, "initial-max-streams-uni", -1, "initial_max_streams_uni (-1: quic-go default)")
	for _, name := range other {
		o.refused.Declare(fs, name, "quic-go advertises one stream window for every stream type: this side sets it by --"+window)
	}
	for _, name := range []string{"max-udp-payload-size", "ack-delay-exponent", "max-ack-delay", "active-connection-id-limit"} {
		o.refused.Declare(fs, name, "quic-go lets no application choose it")
	}
	o.refused.DeclareSwitch(fs, "disable-active-migration", "quic-go lets no application choose it")
	fs.BoolVar(&o.Autotune, "autotune", false, "let flow-control windows grow (default: pinned to the advertised values)")
	fs.StringVar(&o.CC, "cc", "cubic", "congestion control: cubic, quic-go's only one")
	o.refused.Declare(fs, "cipher", "Go's crypto/tls chooses the TLS 1.3 suite itself (tls.Config.CipherSuites is TLS 1.2's)")
	o.refused.Declare(fs, "ack-frequency", "quic-go 0.65 does not speak the ACK frequency extension")
	o.refused.Declare(fs, "gro", "quic-go 0.65 does not use GRO (it reads batches with recvmmsg)")
	golab.OneOf(fs, &o.GSO, "gso", "true|false: UDP generic segmentation offload of sends (default: quic-go's own, on where the kernel has it)",
		"true", "false")
	fs.StringVar(&o.Keylog, "keylog", "", "append the TLS secrets (NSS key log format) to this file")
	fs.StringVar(&o.QlogDir, "qlog-dir", "", "write qlog files into this directory")
	return fs, o
}

// Parse reads `PROGRAM ip:port [flags]` (golab.Refusals.Parse), refuses what
// quic-go cannot do and the required flags left out, and returns the address.
func (o *Options) Parse(fs *flag.FlagSet, args []string, required ...string) string {
	address := o.refused.Parse(fs, args, required...)
	if o.CC != "cubic" {
		golab.Refuse("quic-go has no congestion control " + o.CC + ": only cubic")
	}
	return address
}

// ClientTLS is a client's TLS configuration: the replay protocol's ALPN and the
// key log, if asked for; any certificate is accepted (a lab server's is throw-away).
func (o *Options) ClientTLS() *tls.Config {
	return golab.KeyLog(&tls.Config{InsecureSkipVerify: true, NextProtos: []string{ALPN}}, o.Keylog)
}

// ServerTLS is a server's: the certificate chain and key of the PEM files
// named, the replay protocol's ALPN and the key log, if asked for.
func (o *Options) ServerTLS(certFile, keyFile string) (*tls.Config, error) {
	cert, err := tls.LoadX509KeyPair(certFile, keyFile)
	if err != nil {
		return nil, err
	}
	return golab.KeyLog(&tls.Config{Certificates: []tls.Certificate{cert}, NextProtos: []string{ALPN}}, o.Keylog), nil
}

// Config turns the options into a quic-go configuration, to be made before the
// connection's socket: qlog goes through quic-go's own tracer, which writes into
// $QLOGDIR, and GSO is quic-go's unless $QUIC_GO_DISABLE_GSO says otherwise,
// read when ListenAddr or DialAddr wraps the socket (isGSOEnabled, quic-go 0.65);
// --gso=true sets it to false so that an inherited one cannot turn GSO off.
func (o *Options) Config() *quic.Config {
	if o.QlogDir != "" {
		os.Setenv("QLOGDIR", o.QlogDir)
	}
	if o.GSO != "" {
		os.Setenv("QUIC_GO_DISABLE_GSO", strconv.FormatBool(o.GSO == "false"))
	}
	conf := &quic.Config{
		MaxIdleTimeout:                 time.Duration(o.MaxIdleTimeoutMs) * time.Millisecond,
		InitialStreamReceiveWindow:     o.StreamWindow,
		InitialConnectionReceiveWindow: o.InitialMaxData,
		Tracer:                         qlog.DefaultConnectionTracer,
	}
	conf.MaxIncomingStreams = streamsLimit(o.MaxStreamsBidi)
	conf.MaxIncomingUniStreams = streamsLimit(o.MaxStreamsUni)
	if o.Autotune {
		conf.MaxStreamReceiveWindow = max(o.StreamWindow, autotuneMaxStreamWindow)
		conf.MaxConnectionReceiveWindow = max(o.InitialMaxData, autotuneMaxConnectionWindow)
	} else {
		// quic-go grows a window only while it is below its maximum: equal means pinned.
		conf.MaxStreamReceiveWindow = o.StreamWindow
		conf.MaxConnectionReceiveWindow = o.InitialMaxData
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
