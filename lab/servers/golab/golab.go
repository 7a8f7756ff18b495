// Package golab is what the lab's Go servers share: the command line of
// lab/servers/common (address, certificate, flow control by transport-parameter
// name with dashes, the application's choices) and a clean exit on SIGTERM.
package golab

import (
	"crypto/tls"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"strings"
	"syscall"
)

// Args are the flags a lab server takes; -1 (or nil) leaves the library's own value.
type Args struct {
	Listen, Cert, Key string
	// Transport parameters, by their RFC 9000 names.
	MaxIdleTimeout, InitialMaxData, InitialMaxStreamDataBidiLocal, InitialMaxStreamDataBidiRemote,
	InitialMaxStreamDataUni, InitialMaxStreamsBidi, InitialMaxStreamsUni int64
	// What the application chooses (lab.kinds.APPLICATION_CHOICES).
	ALPN                    []string
	CIDLength               int
	Datagrams               *bool
	DisableActiveMigration  bool
	ActiveConnectionIDLimit int64
	PreferredAddress        string
	Retry                   bool
}

// Parse reads `PROGRAM ip:port --cert=C --key=K [flags]`, refusing the
// application choices the library (named) does not offer.
func Parse(library string, offered ...string) *Args {
	if len(os.Args) < 2 || strings.HasPrefix(os.Args[1], "-") {
		Refuse("usage: " + os.Args[0] + " ip:port --cert=C --key=K [flags]")
	}
	a := &Args{Listen: os.Args[1]}
	f := flag.NewFlagSet(os.Args[0], flag.ExitOnError)
	f.StringVar(&a.Cert, "cert", "", "PEM certificate chain")
	f.StringVar(&a.Key, "key", "", "PEM private key")
	for name, p := range map[string]*int64{
		"max-idle-timeout": &a.MaxIdleTimeout, "initial-max-data": &a.InitialMaxData,
		"initial-max-stream-data-bidi-local":  &a.InitialMaxStreamDataBidiLocal,
		"initial-max-stream-data-bidi-remote": &a.InitialMaxStreamDataBidiRemote,
		"initial-max-stream-data-uni":         &a.InitialMaxStreamDataUni,
		"initial-max-streams-bidi":            &a.InitialMaxStreamsBidi, "initial-max-streams-uni": &a.InitialMaxStreamsUni,
		"active-connection-id-limit": &a.ActiveConnectionIDLimit,
	} {
		f.Int64Var(p, name, -1, "transport parameter "+name)
	}
	alpn := f.String("alpn", "h3", "ALPN protocols accepted, comma-separated")
	f.IntVar(&a.CIDLength, "cid-length", -1, "length of the server's connection IDs")
	datagrams := f.String("datagrams", "", "true or false: send max_datagram_frame_size")
	f.BoolVar(&a.DisableActiveMigration, "disable-active-migration", false, "send disable_active_migration")
	f.StringVar(&a.PreferredAddress, "preferred-address", "", "ip:port sent as preferred_address")
	f.BoolVar(&a.Retry, "retry", false, "answer every new connection with a Retry")
	f.Parse(os.Args[2:])
	a.ALPN = strings.Split(*alpn, ",")
	if *datagrams != "" {
		on := *datagrams == "true"
		a.Datagrams = &on
	}
	asked := map[string]bool{
		"cid-length": a.CIDLength >= 0, "datagrams": a.Datagrams != nil,
		"disable-active-migration": a.DisableActiveMigration, "active-connection-id-limit": a.ActiveConnectionIDLimit >= 0,
		"preferred-address": a.PreferredAddress != "", "retry": a.Retry,
	}
	for _, name := range offered {
		delete(asked, name)
	}
	for name, set := range asked {
		if set {
			Refuse(fmt.Sprintf("%s lets no application choose --%s", library, name))
		}
	}
	go func() {
		signals := make(chan os.Signal, 1)
		signal.Notify(signals, syscall.SIGTERM, syscall.SIGINT)
		<-signals
		os.Exit(0)
	}()
	return a
}

// TLS is the server's TLS configuration: the certificate and the ALPN list.
func (a *Args) TLS() *tls.Config {
	cert, err := tls.LoadX509KeyPair(a.Cert, a.Key)
	if err != nil {
		Refuse(err.Error())
	}
	return &tls.Config{Certificates: []tls.Certificate{cert}, NextProtos: a.ALPN, MinVersion: tls.VersionTLS13}
}

// Refuse prints one line and exits with status 2.
func Refuse(message string) {
	fmt.Fprintln(os.Stderr, "error: "+message)
	os.Exit(2)
}
