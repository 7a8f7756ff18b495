// linkem is qreplay's userspace link emulator: it relays IP packets between
// a tun device in the client namespace and one in the server namespace with
// per-direction delay, jitter, Bernoulli or Gilbert-Elliott loss, a rate
// limit with a bounded drop-tail queue, and reordering. It stands in for
// tc netem on kernels without sch_netem.
//
//	linkem relay --client-netns NS --client-dev DEV --server-netns NS --server-dev DEV [link flags]
//	linkem echo --listen ADDR          (UDP echo, for calibration)
//	linkem ping --target ADDR          (UDP RTT samples, JSON summary)
//	linkem blast --target ADDR --pps N (paced time-stamped load, sendmmsg)
//	linkem sink --listen ADDR          (one-way latency of blast's datagrams, JSON summary)
//	linkem timer --interval D          (a writer's wake-up error alone: the machine's floor)
//
// "down" is server to client, "up" client to server. Counters are written
// as JSON to --stats-file (at start, every --stats-interval, on SIGUSR1 and
// at exit) and printed on stdout at exit (SIGTERM/SIGINT).
package main

import (
	"fmt"
	"os"
	"strings"
)

// commands are linkem's subcommands, in the order its usage lists them.
var commands = []struct {
	name string
	run  func(args []string) error
}{
	{"relay", runRelay}, {"echo", runEcho}, {"ping", runPing}, {"blast", runBlast}, {"sink", runSink},
	{"timer", runTimer},
}

func main() {
	names := make([]string, len(commands))
	for i, command := range commands {
		names[i] = command.name
	}
	if len(os.Args) < 2 {
		fmt.Fprintf(os.Stderr, "usage: linkem %s [flags] (-h for flags)\n", strings.Join(names, "|"))
		os.Exit(2)
	}
	err := fmt.Errorf("unknown command %q: want %s or %s", os.Args[1],
		strings.Join(names[:len(names)-1], ", "), names[len(names)-1])
	for _, command := range commands {
		if command.name == os.Args[1] {
			err = command.run(os.Args[2:])
		}
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "linkem:", err)
		os.Exit(2)
	}
}
