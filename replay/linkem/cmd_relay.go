package main

import (
	"encoding/json"
	"flag"
	"fmt"
	"math/rand/v2"
	"os"
	"os/signal"
	"runtime"
	"runtime/debug"
	"strconv"
	"strings"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

type directionFlags struct {
	delay, jitter       time.Duration
	lossPct, reorderPct float64
	gilbert             string
	rate                float64
	queuePackets        int
	queueBytes          int
}

func (f *directionFlags) register(fs *flag.FlagSet, dir string) {
	fs.DurationVar(&f.delay, dir+"-delay", 0, "added one-way delay "+dir)
	fs.DurationVar(&f.jitter, dir+"-jitter", 0, "uniform jitter +- this "+dir+" (order kept)")
	fs.Float64Var(&f.lossPct, dir+"-loss", 0, "Bernoulli loss percent "+dir)
	fs.StringVar(&f.gilbert, dir+"-gilbert", "", "Gilbert-Elliott loss "+dir+" as P,R,LOSS_BAD,LOSS_GOOD percents (netem gemodel p r 1-h 1-k)")
	fs.Float64Var(&f.reorderPct, dir+"-reorder", 0, "percent of packets sent at once, overtaking the delayed ones "+dir)
	fs.Float64Var(&f.rate, dir+"-rate", 0, "rate limit in bits/s "+dir+" (0: unlimited)")
	fs.IntVar(&f.queuePackets, dir+"-queue-packets", 0, "drop-tail queue limit in packets "+dir+" (0: none)")
	fs.IntVar(&f.queueBytes, dir+"-queue-bytes", 0, "drop-tail queue limit in bytes "+dir+" (0: none)")
}

func (f *directionFlags) config(dir string) (DirectionConfig, error) {
	c := DirectionConfig{
		Delay:    f.delay,
		Jitter:   f.jitter,
		ReorderP: f.reorderPct / 100,
		Shaper:   Shaper{RateBitsPerSec: f.rate, LimitPackets: f.queuePackets, LimitBytes: f.queueBytes},
	}
	if f.lossPct < 0 || f.lossPct > 100 || f.reorderPct < 0 || f.reorderPct > 100 {
		return c, fmt.Errorf("--%s-loss and --%s-reorder are percents in 0..100", dir, dir)
	}
	if f.lossPct > 0 && f.gilbert != "" {
		return c, fmt.Errorf("--%s-loss and --%s-gilbert exclude each other", dir, dir)
	}
	if f.lossPct > 0 {
		c.Loss = &Bernoulli{P: f.lossPct / 100}
	}
	if f.gilbert != "" {
		parts := strings.Split(f.gilbert, ",")
		if len(parts) != 4 {
			return c, fmt.Errorf("--%s-gilbert wants P,R,LOSS_BAD,LOSS_GOOD", dir)
		}
		var v [4]float64
		for i, p := range parts {
			x, err := strconv.ParseFloat(strings.TrimSpace(p), 64)
			if err != nil || x < 0 || x > 100 {
				return c, fmt.Errorf("--%s-gilbert: %q is not a percent", dir, p)
			}
			v[i] = x / 100
		}
		c.Loss = &GilbertElliott{P: v[0], R: v[1], LossBad: v[2], LossGood: v[3]}
	}
	return c, nil
}

func runRelay(args []string) error {
	fs := flag.NewFlagSet("linkem relay", flag.ContinueOnError)
	clientNS := fs.String("client-netns", "", "client network namespace (name in /run/netns or path)")
	clientDev := fs.String("client-dev", "", "tun device in the client namespace")
	serverNS := fs.String("server-netns", "", "server network namespace")
	serverDev := fs.String("server-dev", "", "tun device in the server namespace")
	mtu := fs.Int("mtu", 1500, "largest packet on the wire (GSO bursts of up to 64 KB stand for several)")
	lineLen := fs.Int("delay-line", 1<<16, "packets the delay line of each direction holds")
	spin := fs.Duration("spin", 30*time.Microsecond, "spin instead of sleeping for the last part of each wait")
	early := fs.Duration("early", 10*time.Microsecond, "send a packet this much before it is due rather than wait for it")
	realtime := fs.Bool("realtime", true, "run the writers at SCHED_FIFO priority (needs root; sharper timing under load)")
	seed := fs.Uint64("seed", 0, "random seed (0: from the clock)")
	statsFile := fs.String("stats-file", "", "write counters as JSON here")
	statsEvery := fs.Duration("stats-interval", 0, "also write counters this often (0: only on SIGUSR1 and exit)")
	var down, up directionFlags
	down.register(fs, "down")
	up.register(fs, "up")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if *clientNS == "" || *clientDev == "" || *serverNS == "" || *serverDev == "" {
		return fmt.Errorf("--client-netns, --client-dev, --server-netns and --server-dev are required")
	}
	downCfg, err := down.config("down")
	if err != nil {
		return err
	}
	upCfg, err := up.config("up")
	if err != nil {
		return err
	}
	clientFd, err := openTun(*clientNS, *clientDev)
	if err != nil {
		return err
	}
	serverFd, err := openTun(*serverNS, *serverDev)
	if err != nil {
		return err
	}
	if *seed == 0 {
		*seed = uint64(time.Now().UnixNano())
	}
	start := time.Now()
	clock := func() int64 { return int64(time.Since(start)) }
	// A direction that treats a GSO burst like each of its packets takes
	// bursts whole from its input; otherwise the kernel segments them.
	if err := setOffloads(serverFd, downCfg.treatsBurstsAlike()); err != nil {
		return fmt.Errorf("offloads of %s: %w", *serverDev, err)
	}
	if err := setOffloads(clientFd, upCfg.treatsBurstsAlike()); err != nil {
		return fmt.Errorf("offloads of %s: %w", *clientDev, err)
	}
	pools := newBufferPools(*mtu, 2*(*lineLen)) // both directions' delay lines
	// Four goroutines own a thread each (a reader and a writer per
	// direction). With GOMAXPROCS at the core count (2 here) a thread back
	// from read() or nanosleep() queued for a P behind a spinning writer:
	// stalls of many milliseconds. A P for each of them, plus the rest.
	runtime.GOMAXPROCS(max(runtime.GOMAXPROCS(0), 4+2))
	// A garbage collection scans goroutine stacks; a real-time reader back
	// from read() then spins until the scan ends, and when the collector's
	// thread waits for the same core the pair stalls for the kernel's
	// 50 ms slices given to ordinary threads (seen: errors of a second).
	// The relay allocates nothing per packet, so collect only if memory
	// ever grows far past what the delay lines can hold (the counters
	// written for each SIGUSR1 are a few KB).
	debug.SetGCPercent(-1)
	debug.SetMemoryLimit(1 << 30)
	fatal := make(chan error, 2)
	stats := map[string]*DirectionStats{"down": {}, "up": {}}
	dirs := []*direction{
		{name: "down", in: serverFd, out: clientFd, model: pathModel{cfg: downCfg, rng: rand.New(rand.NewPCG(*seed, 1))}},
		{name: "up", in: clientFd, out: serverFd, model: pathModel{cfg: upCfg, rng: rand.New(rand.NewPCG(*seed, 2))}},
	}
	for _, d := range dirs {
		d.line = make(chan *packet, *lineLen)
		d.stats = stats[d.name]
		d.pacer, d.pools, d.realtime = pacer{clock: clock, spin: *spin, early: *early}, pools, *realtime
		d.onFatal = func(e error) { fatal <- e }
		if err := unix.SetNonblock(d.in, true); err != nil { // see waitReadable
			return err
		}
		go d.readLoop()
		go d.writeLoop()
	}

	write := func(final bool) {
		doc := map[string]any{"down": stats["down"].Snapshot(), "up": stats["up"].Snapshot(),
			"elapsed_s": time.Since(start).Seconds(), "final": final}
		data, _ := json.Marshal(doc)
		if *statsFile != "" {
			// Write-then-rename so a reader never sees half a document.
			tmp := *statsFile + ".tmp"
			if os.WriteFile(tmp, data, 0o644) == nil {
				os.Rename(tmp, *statsFile)
			}
		}
		if final {
			fmt.Println(string(data))
		}
	}
	write(false) // its appearance tells the caller both tun fds are attached

	sigs := make(chan os.Signal, 4)
	signal.Notify(sigs, syscall.SIGTERM, syscall.SIGINT, syscall.SIGUSR1)
	var tick <-chan time.Time
	if *statsEvery > 0 {
		t := time.NewTicker(*statsEvery)
		defer t.Stop()
		tick = t.C
	}
	for {
		select {
		case s := <-sigs:
			if s == syscall.SIGUSR1 {
				write(false)
				continue
			}
			write(true)
			return nil
		case <-tick:
			write(false)
		case e := <-fatal:
			write(true)
			return e
		}
	}
}
