// Package golab is what the lab's Go servers share: the lab-server command line
// (tparams/program_cli.py, as lab/servers/common: address, certificate, flow
// control by transport-parameter name with dashes, the application's choices)
// and a clean exit on SIGTERM. CommandLine is every Go program's of ours.
package golab

import (
	"context"
	"crypto/tls"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"slices"
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
	a := &Args{}
	f := flag.NewFlagSet(os.Args[0], flag.ContinueOnError)
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
		f.Int64Var(p, name, -1, "transport parameter "+strings.ReplaceAll(name, "-", "_"))
	}
	alpn := f.String("alpn", "h3", "ALPN protocols accepted, comma-separated")
	f.IntVar(&a.CIDLength, "cid-length", -1, "length of the server's connection IDs")
	datagrams := f.String("datagrams", "", "true or false: send max_datagram_frame_size")
	f.BoolVar(&a.DisableActiveMigration, "disable-active-migration", false, "send disable_active_migration")
	f.StringVar(&a.PreferredAddress, "preferred-address", "", "ip:port sent as preferred_address")
	f.BoolVar(&a.Retry, "retry", false, "answer every new connection with a Retry")
	a.Listen = CommandLine(f, os.Args[1:])
	Require(f, "cert", "key")
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

// CommandLine parses `PROGRAM ip:port [--flag=value ...]` as every program of
// ours takes it (tparams/program_cli.py): the address first, each flag spelled
// once, with two dashes (Go's flag package would take one too). It returns the
// address; --help lists the flags (with two dashes) on stdout; a bad command
// line is one line on stderr and status 2.
func CommandLine(f *flag.FlagSet, args []string) string {
	f.Init(f.Name(), flag.ContinueOnError)
	f.SetOutput(io.Discard)
	parse := func(args []string) {
		err := f.Parse(args)
		if err == flag.ErrHelp {
			fmt.Printf("usage: %s ip:port [flags]\n", f.Name())
			f.VisitAll(func(option *flag.Flag) {
				kind, usage := flag.UnquoteUsage(option)
				fmt.Printf("  --%s\n    \t%s\n", strings.TrimSpace(option.Name+" "+kind), usage)
			})
			os.Exit(0)
		}
		if err != nil {
			Refuse(err.Error())
		}
	}
	for _, arg := range args {
		if strings.HasPrefix(arg, "-") && !strings.HasPrefix(arg, "--") {
			Refuse("flags take two dashes: " + arg)
		}
	}
	if len(args) == 0 || strings.HasPrefix(args[0], "-") {
		parse(args)
		Refuse(fmt.Sprintf("usage: %s ip:port [flags]", f.Name()))
	}
	parse(args[1:])
	if f.NArg() > 0 {
		Refuse("unexpected argument " + f.Arg(0))
	}
	return args[0]
}

// OneOf declares --name, which takes one of values, into *dest (left as it is
// when the flag is not given).
func OneOf(fs *flag.FlagSet, dest *string, name, usage string, values ...string) {
	fs.Func(name, usage, func(value string) error {
		if !slices.Contains(values, value) {
			return fmt.Errorf("%s, not %q", strings.Join(values, " or "), value)
		}
		*dest = value
		return nil
	})
}

// Require refuses a command line that leaves out any of the flags named.
func Require(f *flag.FlagSet, names ...string) {
	given := map[string]bool{}
	f.Visit(func(option *flag.Flag) { given[option.Name] = true })
	for _, name := range names {
		if !given[name] {
			Refuse("--" + name + " is required")
		}
	}
}

// Refusals are the flags a program takes only to refuse them, each with why it
// cannot honour it: the command line is one contract for every program
// (tparams/program_cli.py), so what a library or a transport has no
// counterpart of is refused in one line, status 2, not an unknown flag.
type Refusals map[string]string

// Declare adds --name, which takes a value, refused with why.
func (r Refusals) Declare(fs *flag.FlagSet, name, why string) {
	fs.String(name, "", "refused: "+why)
	r[name] = why
}

// DeclareSwitch adds --name, which takes none (as --disable-active-migration), refused with why.
func (r Refusals) DeclareSwitch(fs *flag.FlagSet, name, why string) {
	fs.Bool(name, false, "refused: "+why)
	r[name] = why
}

// Parse reads `PROGRAM ip:port [flags]` (CommandLine), refuses the required
// flags left out, then any refused flag given, and returns the address.
func (r Refusals) Parse(fs *flag.FlagSet, args []string, required ...string) string {
	address := CommandLine(fs, args)
	Require(fs, required...)
	fs.Visit(func(option *flag.Flag) {
		if why, refused := r[option.Name]; refused {
			Refuse(fmt.Sprintf("--%s: %s", option.Name, why))
		}
	})
	return address
}

// KeyLog has conf append the TLS secrets (NSS key log format) to the file at
// path, if --keylog named one; a file that cannot be opened is refused in one line.
func KeyLog(conf *tls.Config, path string) *tls.Config {
	if path != "" {
		file, err := os.OpenFile(path, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
		if err != nil {
			Refuse("key log: " + err.Error())
		}
		conf.KeyLogWriter = file
	}
	return conf
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

// Serve accepts connections until the process is stopped, each held open by hold
// in its own goroutine; a failed accept ends the server in one line.
func Serve[C any](accept func(context.Context) (C, error), hold func(C)) {
	for {
		conn, err := accept(context.Background())
		if err != nil {
			Refuse(err.Error())
		}
		go hold(conn)
	}
}
