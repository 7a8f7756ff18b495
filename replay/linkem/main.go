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
)

func main() {
	if len(os.Args) < 2 {
		fmt.Fprintln(os.Stderr, "usage: linkem relay|echo|ping|blast|sink|timer [flags] (-h for flags)")
		os.Exit(2)
	}
	var err error
	switch os.Args[1] {
	case "relay":
		err = runRelay(os.Args[2:])
	case "echo":
		err = runEcho(os.Args[2:])
	case "ping":
		err = runPing(os.Args[2:])
	case "blast":
		err = runBlast(os.Args[2:])
	case "sink":
		err = runSink(os.Args[2:])
	case "timer":
		err = runTimer(os.Args[2:])
	default:
		err = fmt.Errorf("unknown command %q: want relay, echo, ping, blast, sink or timer", os.Args[1])
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "linkem:", err)
		os.Exit(2)
	}
}
