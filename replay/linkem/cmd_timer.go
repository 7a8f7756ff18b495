package main

import (
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"time"
)

// runTimer measures what linkem's writers can achieve on this machine
// without linkem: one thread with a writer's priority and waiting policy
// meets a deadline every --interval and records how far from it each wake-up
// came, as the relay records its delay error. Run beside the load of a relay
// run (minus linkem), its quantiles are the floor linkem's added-delay error
// can reach there: what the scheduler, the timers and (in a virtual machine)
// the host leave.
func runTimer(args []string) error {
	fs := flag.NewFlagSet("linkem timer", flag.ContinueOnError)
	interval := fs.Duration("interval", 10*time.Microsecond, "gap between deadlines (the packet spacing to imitate)")
	duration := fs.Duration("duration", 4*time.Second, "how long to measure")
	spin := fs.Duration("spin", 30*time.Microsecond, "as linkem relay's --spin")
	early := fs.Duration("early", 10*time.Microsecond, "as linkem relay's --early")
	realtime := fs.Bool("realtime", true, "SCHED_FIFO at the writers' priority, as linkem relay")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if *interval <= 0 || *duration <= *interval {
		return fmt.Errorf("--interval must be positive and shorter than --duration")
	}
	ownThread(writerPriority, *realtime)
	start := time.Now()
	p := pacer{clock: func() int64 { return int64(time.Since(start)) }, spin: *spin, early: *early}
	var errors errorHistogram
	deadlines := 0
	for due := int64(*interval); due < int64(*duration); due += int64(*interval) {
		p.waitUntil(due)
		errors.Add(p.clock() - due)
		deadlines++
	}
	return json.NewEncoder(os.Stdout).Encode(map[string]any{
		"deadlines":    deadlines,
		"error_p50_us": errors.Quantile(0.50),
		"error_p99_us": errors.Quantile(0.99),
		"error_max_us": float64(errors.maxNs.Load()) / 1000,
	})
}
