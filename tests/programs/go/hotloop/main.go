// hotloop calls main.hot (or main.deep) in a tight loop from -workers goroutines and main.cold ten
// times a second, and prints how many calls of hot it made in each -every interval:
// the throughput a probe on hot costs, and gets back once the probe is off.
package main

import (
	"flag"
	"fmt"
	"os"
	"sync/atomic"
	"time"
)

var sink atomic.Int64

//go:noinline
func hot(n int64) int64 {
	return n*3 + 1
}

// deep calls hot: not a leaf, so it opens with a stack check, whose jbe noop probes
// (an instruction the kernel emulates, where hot's first one is single-stepped).
//
//go:noinline
func deep(n int64) int64 {
	return hot(n) + 1
}

//go:noinline
func cold(n int64) int64 {
	return n + 7
}

func main() {
	workers := flag.Int("workers", 1, "goroutines calling hot")
	every := flag.Duration("every", 250*time.Millisecond, "how often to print the count")
	call := flag.String("call", "hot", "what the loop calls: hot, or deep (which calls hot)")
	rate := flag.Int("rate", 0, "calls of hot per second per goroutine (0: as fast as it can)")
	flag.Parse()
	var calls atomic.Int64
	for w := 0; w < *workers; w++ {
		go func() {
			var local, acc int64
			start := time.Now()
			for {
				for i := 0; i < 1000; i++ {
					if *call == "deep" {
						acc += deep(local)
					} else {
						acc += hot(local)
					}
					local++
				}
				calls.Add(1000)
				sink.Store(acc)
				if *rate > 0 { // sleep until the schedule of -rate calls a second
					due := start.Add(time.Duration(local) * time.Second / time.Duration(*rate))
					time.Sleep(time.Until(due))
				}
			}
		}()
	}
	go func() {
		for n := int64(0); ; n++ {
			sink.Add(cold(n))
			time.Sleep(100 * time.Millisecond)
		}
	}()
	fmt.Fprintf(os.Stdout, "ready %d\n", os.Getpid())
	last, at := calls.Load(), time.Now()
	for {
		time.Sleep(*every)
		now, t := calls.Load(), time.Now()
		fmt.Fprintf(os.Stdout, "rate %.0f\n", float64(now-last)/t.Sub(at).Seconds())
		last, at = now, t
	}
}
