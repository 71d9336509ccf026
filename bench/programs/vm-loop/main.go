// vm-loop makes one VictoriaMetrics/metrics update in a tight loop and says how long
// each round took, so that what noop adds to an update can be measured (bench/vm.py):
// -op counter.Inc, floatcounter.Add, histogram.Update, summary.Update or
// getorcreate.Inc (a named counter looked up, then incremented); -n calls a round,
// -rounds rounds, each printed as {"op": .., "calls": .., "ns_per_call": ..}. It serves
// its /metrics (the first line it prints: "listening ADDR") before the first round and
// waits for a line on stdin to start.
package main

import (
	"bufio"
	"encoding/json"
	"flag"
	"fmt"
	"net"
	"net/http"
	"os"
	"time"

	"github.com/VictoriaMetrics/metrics"
)

func main() {
	op := flag.String("op", "counter.Inc", "the update")
	n := flag.Int("n", 1000000, "calls a round")
	rounds := flag.Int("rounds", 3, "rounds")
	flag.Parse()
	c := metrics.NewCounter(`loop_total{op="inc"}`)
	f := metrics.NewFloatCounter("loop_float_total")
	h := metrics.NewHistogram("loop_seconds")
	s := metrics.NewSummary("loop_summary_seconds")
	updates := map[string]func(int){
		"counter.Inc":      func(int) { c.Inc() },
		"floatcounter.Add": func(int) { f.Add(2.5) },
		"histogram.Update": func(i int) { h.Update(float64(i&1023) / 100) },
		"summary.Update":   func(i int) { s.Update(float64(i&1023) / 100) },
		"getorcreate.Inc":  func(int) { metrics.GetOrCreateCounter(`loop_named_total{a="b"}`).Inc() },
	}
	update, ok := updates[*op]
	if !ok {
		fmt.Fprintln(os.Stderr, "unknown op", *op)
		os.Exit(2)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	http.HandleFunc("/metrics", func(w http.ResponseWriter, _ *http.Request) {
		metrics.WritePrometheus(w, false)
	})
	go http.Serve(ln, nil)
	fmt.Printf("listening %s\n", ln.Addr())
	bufio.NewReader(os.Stdin).ReadString('\n')
	for r := 0; r < *rounds; r++ {
		start := time.Now()
		for i := 0; i < *n; i++ {
			update(i)
		}
		ns := time.Since(start).Nanoseconds()
		line, _ := json.Marshal(map[string]any{"op": *op, "calls": *n,
			"ns_per_call": float64(ns) / float64(*n)})
		fmt.Println(string(line))
	}
}
