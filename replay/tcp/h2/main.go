// h2 speaks the replay protocol (tparams/workloads.py) over kernel TCP, TLS 1.3
// and HTTP/2, so that every workload of qreplay can be measured over TCP beside
// QUIC with one program of ours at both ends (Debian's curl cannot upload to
// caddy nor time a request-response run). Only Go's standard library:
//
//	h2 server ip:port --cert=C --key=K [knobs]
//	h2 client ip:port --size=N [--direction=down|up] [--requests=N] [--concurrency=N] [--timeout-s=S] [knobs]
//
// The command lines are the replay-server and replay-client roles of
// tparams/program_cli.py. Over HTTP/2 the protocol's requests are
// "GET /<size>", answered with <size> bytes, and "PUT /<size>" with a
// <size>-byte body, answered with the number of body bytes the server read, in
// decimal. The client makes every request on one TCP connection (HTTP/2
// streams, at most --concurrency open at once) and prints the one JSON line of
// the protocol. What TCP has no counterpart of is refused in one line, status 2:
// the transport parameters (but a server's --initial-max-streams-bidi, HTTP/2's
// SETTINGS_MAX_CONCURRENT_STREAMS), --cipher (Go chooses the TLS 1.3 suite itself),
// --gso (UDP's) and --qlog-dir.
//
// The server prints, once the last byte of a response it sent was acknowledged,
// one JSON line with the kernel's own chronographs of the connection's socket
// (TCP_INFO: how long it was busy sending, limited by the receiver's window and
// by its send buffer), which the run stores with the sender's counters.
package main

import (
	"context"
	"crypto/tls"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"quictp/lab/servers/golab"
)

// HTTP/2's own flow control, the same at both ends so that a download and an
// upload differ by direction alone (Go's defaults give a server 1 MiB windows, a
// client 4 MiB a stream): large enough that TCP's autotuned window, not
// HTTP/2's, limits a transfer, as the ceilings the QUIC stacks grow to under
// --autotune (replay/quicgo/bulk).
const (
	streamWindow     = 16 << 20
	connectionWindow = 24 << 20
)

// transportParameters are QUIC's (RFC 9000), which the contract lets a caller
// set and TCP has nothing of.
var transportParameters = []string{
	"max-idle-timeout", "max-udp-payload-size", "initial-max-data", "initial-max-stream-data-bidi-local",
	"initial-max-stream-data-bidi-remote", "initial-max-stream-data-uni", "initial-max-streams-bidi",
	"initial-max-streams-uni", "ack-delay-exponent", "max-ack-delay", "active-connection-id-limit",
}

// knobs are the options both roles take besides their own (tparams/knobs.py).
type knobs struct {
	cc      string // "" leaves the kernel's default congestion control
	keylog  string
	refused golab.Refusals // what TCP and Go's TLS cannot honour
}

// refusedRetries bounds the retries of a request whose stream the server refused (request).
const refusedRetries = 8

// serverStreams is the one transport parameter a server takes: QUIC's initial_max_streams_bidi as HTTP/2's
// SETTINGS_MAX_CONCURRENT_STREAMS, the streams a client may have open at once (a QUIC server raising its credit
// as streams close, as quic-go does, holds them alike). Its flag is the contract's spelling.
const serverStreams = "initial-max-streams-bidi"

func registerKnobs(fs *flag.FlagSet, role string) *knobs {
	k := &knobs{refused: golab.Refusals{}}
	golab.OneOf(fs, &k.cc, "cc", "cubic|bbr: the TCP congestion control of this end's socket (default: the kernel's)",
		"cubic", "bbr")
	// Taken and nothing done: the kernel grows TCP's windows itself whatever
	// the application does (tcp_moderate_rcvbuf), and HTTP/2's are fixed at
	// streamWindow and connectionWindow so that they never bind.
	fs.Bool("autotune", false, "accepted: the kernel grows TCP's windows always")
	k.refused.Declare(fs, "cipher", "Go's crypto/tls chooses the TLS 1.3 suite itself (tls.Config.CipherSuites is TLS 1.2's)")
	k.refused.Declare(fs, "gso", "UDP generic segmentation offload: this program speaks TCP")
	k.refused.Declare(fs, "ack-frequency", "TCP's delayed ACKs are the kernel's")
	k.refused.Declare(fs, "gro", "UDP generic receive offload: this program speaks TCP")
	fs.StringVar(&k.keylog, "keylog", "", "append the TLS secrets (NSS key log format) to this file")
	k.refused.Declare(fs, "qlog-dir", "qlog is QUIC's: TCP has none")
	for _, name := range transportParameters {
		if role == "server" && name == serverStreams {
			continue // the server's own flag (server)
		}
		k.refused.Declare(fs, name, "a QUIC transport parameter: TCP has none")
	}
	k.refused.DeclareSwitch(fs, "disable-active-migration", "a QUIC transport parameter: TCP has none")
	return k
}

// tls adds the key log, if asked for, to a TLS 1.3 configuration offering HTTP/2 alone.
func (k *knobs) tls(conf *tls.Config) *tls.Config {
	conf.MinVersion = tls.VersionTLS13
	conf.NextProtos = []string{"h2"}
	return golab.KeyLog(conf, k.keylog)
}

// control sets the congestion control of a socket before it connects or
// listens; a listener's is inherited by the connections it accepts, from the
// SYN-ACK on. A kernel without it (or not allowing it) is refused in one line.
func (k *knobs) control(network, address string, conn syscall.RawConn) error {
	if k.cc == "" {
		return nil
	}
	var err error
	if controlErr := conn.Control(func(fd uintptr) {
		err = syscall.SetsockoptString(int(fd), syscall.IPPROTO_TCP, syscall.TCP_CONGESTION, k.cc)
	}); controlErr != nil {
		return controlErr
	}
	if err != nil {
		golab.Refuse(fmt.Sprintf("--cc=%s: the kernel refuses TCP_CONGESTION %s: %v", k.cc, k.cc, err))
	}
	return nil
}

// http2Only is HTTP/2 alone: a peer that cannot speak it is not measured over HTTP/1.1 instead.
func http2Only() *http.Protocols {
	protocols := &http.Protocols{}
	protocols.SetHTTP2(true)
	return protocols
}

func windows(streams int) *http.HTTP2Config {
	return &http.HTTP2Config{MaxReceiveBufferPerStream: streamWindow, MaxReceiveBufferPerConnection: connectionWindow,
		MaxConcurrentStreams: streams}
}

func main() {
	program := filepath.Base(os.Args[0])
	if len(os.Args) < 2 || (os.Args[1] != "server" && os.Args[1] != "client") {
		golab.Refuse(fmt.Sprintf("usage: %s server|client ip:port [flags]", program))
	}
	fs := flag.NewFlagSet(program+" "+os.Args[1], flag.ContinueOnError)
	if os.Args[1] == "server" {
		server(fs, os.Args[2:])
	} else {
		client(fs, os.Args[2:])
	}
}

// server answers the replay protocol's requests on every connection until SIGTERM.
func server(fs *flag.FlagSet, args []string) {
	cert := fs.String("cert", "", "PEM certificate chain")
	key := fs.String("key", "", "PEM private key")
	streams := fs.Int(serverStreams, 0, "HTTP/2's SETTINGS_MAX_CONCURRENT_STREAMS: the streams a client may have "+
		"open at once (0: Go's default, 250)")
	k := registerKnobs(fs, "server")
	address := k.refused.Parse(fs, args, "cert", "key")
	pair, err := tls.LoadX509KeyPair(*cert, *key)
	if err != nil {
		golab.Refuse(err.Error())
	}
	listener, err := (&net.ListenConfig{Control: k.control}).Listen(context.Background(), "tcp", address)
	if err != nil {
		golab.Refuse(err.Error())
	}
	go func() {
		signals := make(chan os.Signal, 1)
		signal.Notify(signals, syscall.SIGTERM, syscall.SIGINT)
		<-signals
		os.Exit(0)
	}()
	srv := &http.Server{
		Handler: http.HandlerFunc(answer),
		ConnContext: func(ctx context.Context, c net.Conn) context.Context {
			if secured, ok := c.(*tls.Conn); ok { // ServeTLS's listener hands over the TLS connection
				c = secured.NetConn()
			}
			return context.WithValue(ctx, socketKey{}, c)
		},
		TLSConfig: k.tls(&tls.Config{Certificates: []tls.Certificate{pair}}),
		Protocols: http2Only(),
		HTTP2:     windows(*streams),
	}
	err = srv.ServeTLS(listener, "", "")
	fmt.Fprintln(os.Stderr, "error: "+err.Error())
	os.Exit(1)
}

// answer serves one request: a GET's bytes, or a PUT's count once its body has ended.
func answer(w http.ResponseWriter, r *http.Request) {
	size, err := strconv.ParseUint(strings.TrimPrefix(r.URL.Path, "/"), 10, 64)
	if err != nil {
		http.Error(w, "not /<size>: "+r.URL.Path, http.StatusNotFound)
		return
	}
	switch r.Method {
	case http.MethodGet:
		w.Header().Set("Content-Length", strconv.FormatUint(size, 10))
		io.CopyBuffer(w, io.LimitReader(filler{}, int64(size)), make([]byte, 64<<10))
		http.NewResponseController(w).Flush()
		if socket, ok := r.Context().Value(socketKey{}).(syscall.Conn); ok {
			// not in the handler: its return ends the stream, which the client waits for
			go reportChronographs(socket)
		}
	case http.MethodPut:
		received, err := io.CopyBuffer(io.Discard, r.Body, make([]byte, 64<<10))
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		io.WriteString(w, strconv.FormatInt(received, 10))
	default:
		http.Error(w, "GET or PUT", http.StatusMethodNotAllowed)
	}
}

// socketKey is the request context's key of the connection's socket (http.Server.ConnContext).
type socketKey struct{}

// chronographs is the kernel's account of a sending socket (Linux's tcp_chrono, in TCP_INFO), in seconds.
type chronographs struct {
	Busy          float64 `json:"sender_busy_s"`           // data outstanding (tcpi_busy_time)
	RwndLimited   float64 `json:"sender_rwnd_limited_s"`   // the next segment did not fit the receiver's window
	SndbufLimited float64 `json:"sender_sndbuf_limited_s"` // the application could not queue more in the send buffer
	Retransmits   uint32  `json:"sender_total_retrans"`    // segments retransmitted over the connection
}

var printing sync.Mutex

// reportChronographs prints the socket's chronographs once what it sent is all acknowledged (the busy
// time stops there), or after 5 s; the last reading when the socket closes first (the client, done, closed
// the connection: little can have been outstanding), nothing when there was none.
func reportChronographs(socket syscall.Conn) {
	raw, err := socket.SyscallConn()
	if err != nil {
		return
	}
	var info *unix.TCPInfo
	for deadline := time.Now().Add(5 * time.Second); time.Now().Before(deadline); time.Sleep(2 * time.Millisecond) {
		var read *unix.TCPInfo
		readInfo := func(fd uintptr) { read, err = unix.GetsockoptTCPInfo(int(fd), unix.IPPROTO_TCP, unix.TCP_INFO) }
		if raw.Control(readInfo) != nil || err != nil {
			break
		}
		info = read
		if info.Unacked == 0 && info.Notsent_bytes == 0 {
			break
		}
	}
	if info == nil {
		return
	}
	printing.Lock()
	defer printing.Unlock()
	json.NewEncoder(os.Stdout).Encode(chronographs{float64(info.Busy_time) / 1e6, float64(info.Rwnd_limited) / 1e6,
		float64(info.Sndbuf_limited) / 1e6, info.Total_retrans})
}

// filler is body bytes without end; their content is not part of any measurement.
type filler struct{}

func (filler) Read(p []byte) (int, error) {
	for i := range p {
		p[i] = 'q'
	}
	return len(p), nil
}

// exchange is one completed request, as the client saw it (lab/servers/common/src/replay.rs's Exchange).
type exchange struct {
	sent, firstByte, finished time.Time
	bytes                     uint64 // a download's body bytes received, the count an upload's server answered
}

func client(fs *flag.FlagSet, args []string) {
	size := fs.Uint64("size", 0, "bytes each request moves (a GET's response body, a PUT's body)")
	timeout := fs.Float64("timeout-s", 600, "give up (exit 1) after this many seconds")
	direction := "down"
	fs.Func("direction", "down|up: GET, the server sends (default); PUT, the client sends", func(value string) error {
		if value != "down" && value != "up" {
			return fmt.Errorf("down or up, not %q", value)
		}
		direction = value
		return nil
	})
	requests := fs.Int("requests", 1, "requests on the one connection, each of --size bytes")
	concurrency := fs.Int("concurrency", 1, "requests open at once, each on its own stream")
	k := registerKnobs(fs, "client")
	address := k.refused.Parse(fs, args, "size")
	if *requests < 1 || *concurrency < 1 {
		golab.Refuse("--requests and --concurrency take at least 1")
	}

	ctx, cancel := context.WithTimeout(context.Background(), time.Duration(*timeout*float64(time.Second)))
	defer cancel()
	var handshake time.Duration
	dialer := &tls.Dialer{
		NetDialer: &net.Dialer{Control: k.control},
		Config:    k.tls(&tls.Config{InsecureSkipVerify: true}), // lab server, throw-away certificate
	}
	transport := &http.Transport{
		// TCP connect and TLS handshake: the one dial of the one connection (NewClientConn).
		DialTLSContext: func(ctx context.Context, network, address string) (net.Conn, error) {
			start := time.Now()
			conn, err := dialer.DialContext(ctx, network, address)
			handshake = time.Since(start)
			return conn, err
		},
		Protocols: http2Only(),
		HTTP2:     windows(0),
	}
	// A ClientConn is one connection, never a second: every request is a stream of it.
	conn, err := transport.NewClientConn(ctx, "https", address)
	if err != nil {
		fail(ctx, "connect", err)
	}
	defer conn.Close()

	method := map[string]string{"down": http.MethodGet, "up": http.MethodPut}[direction]
	var mu sync.Mutex
	var done []exchange
	var failure error
	slots := make(chan struct{}, *concurrency)
	var wg sync.WaitGroup
	for range *requests {
		slots <- struct{}{}
		wg.Go(func() {
			defer func() { <-slots }()
			result, err := request(ctx, conn, method, address, *size)
			mu.Lock()
			defer mu.Unlock()
			if err != nil {
				if failure == nil { // the first: the others then fail as cancelled
					failure = err
				}
				cancel()
				return
			}
			done = append(done, result)
		})
	}
	wg.Wait()
	if failure != nil {
		fail(ctx, method, failure)
	}
	printResult(handshake, done)
}

// request makes one request of the replay protocol on the connection and checks it moved size bytes.
func request(ctx context.Context, conn *http.ClientConn, method, address string, size uint64) (exchange, error) {
	result := exchange{sent: time.Now()}
	var resp *http.Response
	for attempt := 0; ; attempt++ {
		var body io.Reader
		if method == http.MethodPut {
			body = io.LimitReader(filler{}, int64(size))
		}
		req, err := http.NewRequestWithContext(ctx, method, fmt.Sprintf("https://%s/%d", address, size), body)
		if err != nil {
			return exchange{}, err
		}
		if body != nil {
			req.ContentLength = int64(size)
		}
		resp, err = conn.RoundTrip(req)
		// A stream opened before the server's SETTINGS said how many it allows (the client assumes 100 until
		// then) is refused unprocessed, which RFC 9113 8.7 lets a client retry, as http.Transport does
		// itself and a ClientConn does not; by then the connection's limit is the server's.
		if err != nil && strings.Contains(err.Error(), "REFUSED_STREAM") && attempt < refusedRetries {
			continue
		}
		if err != nil {
			return exchange{}, err
		}
		break
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return exchange{}, fmt.Errorf("%s /%d: status %s", method, size, resp.Status)
	}
	var answer []byte // an upload's count
	buf := make([]byte, 64<<10)
	var received uint64
	for {
		n, err := resp.Body.Read(buf)
		if n > 0 && result.firstByte.IsZero() {
			result.firstByte = time.Now()
		}
		received += uint64(n)
		if method == http.MethodPut && len(answer) < 32 {
			answer = append(answer, buf[:min(n, 32)]...)
		}
		if err == io.EOF {
			break
		}
		if err != nil {
			return exchange{}, err
		}
	}
	result.finished = time.Now()
	result.bytes = received
	if method == http.MethodPut {
		var err error
		if result.bytes, err = strconv.ParseUint(string(answer), 10, 64); err != nil {
			return exchange{}, fmt.Errorf("not a byte count in the upload's answer: %q", answer)
		}
	}
	if result.bytes != size {
		return exchange{}, fmt.Errorf("%s /%d moved %d bytes", method, size, result.bytes)
	}
	return result, nil
}

// printResult prints the protocol's JSON line (tparams/workloads.py), the exchanges in completion order.
func printResult(handshake time.Duration, done []exchange) {
	var start, end time.Time
	var ttfb time.Duration
	var moved uint64
	latencies := []float64{}
	for _, e := range done {
		if start.IsZero() || e.sent.Before(start) {
			start, ttfb = e.sent, e.firstByte.Sub(e.sent)
		}
		if e.finished.After(end) {
			end = e.finished
		}
		moved += e.bytes
		latencies = append(latencies, e.finished.Sub(e.sent).Seconds())
	}
	json.NewEncoder(os.Stdout).Encode(struct {
		Bytes     uint64    `json:"bytes"`
		Duration  float64   `json:"duration_s"`
		Handshake float64   `json:"handshake_s"`
		Requests  int       `json:"requests"`
		TTFB      float64   `json:"ttfb_s"`
		Latencies []float64 `json:"latencies_s"`
	}{moved, end.Sub(start).Seconds(), handshake.Seconds(), len(done), ttfb.Seconds(), latencies})
}

// fail gives up in one line, status 1, naming the timeout when it was the cause.
func fail(ctx context.Context, what string, err error) {
	if ctx.Err() == context.DeadlineExceeded {
		err = fmt.Errorf("gave up after --timeout-s: %w", err)
	}
	fmt.Fprintf(os.Stderr, "error: %s: %v\n", what, err)
	os.Exit(1)
}
