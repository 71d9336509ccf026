// torn observes 1.0 into a histogram (buckets 0.5 and 2), a summary without
// objectives and one with, from -observers goroutines each (pausing -pace between
// two), while -gatherers
// goroutines gather the default registry in a loop (each Gather runs every metric's
// Write, which folds the cold half of a histogram's counts into the hot one): every
// read of them from memory must keep _sum == _count == +Inf, le="2" = _count and
// le="0.5" = 0. It prints "ready" once all of them run.
package main

import (
	"flag"
	"fmt"
	"os"
	"runtime"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

func main() {
	observers := flag.Int("observers", 2, "goroutines observing each metric")
	pace := flag.Duration("pace", 20*time.Microsecond, "an observer's pause between two")
	gatherers := flag.Int("gatherers", 1, "goroutines gathering the registry")
	flag.Parse()
	h := prometheus.NewHistogram(prometheus.HistogramOpts{
		Name: "torn_histogram", Help: "Ones.", Buckets: []float64{0.5, 2}})
	plain := prometheus.NewSummary(prometheus.SummaryOpts{
		Name: "torn_plain_summary", Help: "Ones, no objectives."})
	quant := prometheus.NewSummary(prometheus.SummaryOpts{
		Name: "torn_summary", Help: "Ones, with objectives.",
		Objectives: map[float64]float64{0.5: 0.05, 0.99: 0.001}})
	prometheus.MustRegister(h, plain, quant)
	for i := 0; i < *observers; i++ {
		for _, o := range []prometheus.Observer{h, plain, quant} {
			go func(o prometheus.Observer) {
				for {
					o.Observe(1)
					time.Sleep(*pace)
				}
			}(o)
		}
	}
	for i := 0; i < *gatherers; i++ {
		go func() {
			for {
				if _, err := prometheus.DefaultGatherer.Gather(); err != nil {
					fmt.Fprintln(os.Stderr, err)
					os.Exit(1)
				}
				runtime.Gosched()
			}
		}()
	}
	fmt.Println("ready")
	os.Stdout.Sync()
	for { // the process stays with or without other goroutines
		time.Sleep(time.Hour)
	}
}
