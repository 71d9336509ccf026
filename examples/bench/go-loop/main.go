// Command go-loop is the Go workload of `noop bench`: it calls one
// client_golang method (or a plain function) in a tight loop and says how
// long each round took, so the cost a probe adds to one call can be measured.
//
// Each round prints one JSON line:
//
//	{"op": "counter.Inc", "calls": 1000000, "ns": 5200000, "ns_per_call": 5.2}
//
// and the end prints the metric's value as the program itself reads it:
//
//	{"final": 3000000, "calls_total": 3000000}
//
// Final values: counter.Inc, gauge.Set, histogram.Observe and summary.Observe
// (their sample counts) and func end at calls_total; counter.Add and gauge.Add
// (2.5 per call) at 2.5 times calls_total, gauge.Sub at -2.5 times.
//
// With -rate R the calls are paced at R per second instead (bench/agent_cpu.py
// uses it to measure noop's own CPU at a given rate of probe hits).
package main

import (
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
)

// The metrics live in interface-typed package variables, so that the
// compiler can neither devirtualise nor inline the calls: every call enters
// the method's own machine code, where the probes sit.
var (
	counter   prometheus.Counter
	gauge     prometheus.Gauge
	histogram prometheus.Histogram
	summary   prometheus.Summary // with objectives: its observations buffered
	requests  *prometheus.CounterVec // countervec.Inc: a child looked up, then Inc
)

// work is the plain function the "func" op calls: a probe's cost on a call
// that does next to nothing itself.
//
//go:noinline
func work(x int) int {
	return x + 1
}

// loop makes n calls of op; start is the number of calls made before, so
// that gauge.Set ends at the total and func's chain carries on.
//
//go:noinline
func loop(op string, n, start int) {
	switch op {
	case "counter.Inc":
		for i := 0; i < n; i++ {
			counter.Inc()
		}
	case "counter.Add":
		for i := 0; i < n; i++ {
			counter.Add(2.5)
		}
	case "gauge.Add":
		for i := 0; i < n; i++ {
			gauge.Add(2.5)
		}
	case "gauge.Sub":
		for i := 0; i < n; i++ {
			gauge.Sub(2.5)
		}
	case "gauge.Set":
		for i := start; i < start+n; i++ {
			gauge.Set(float64(i + 1))
		}
	case "histogram.Observe":
		for i := 0; i < n; i++ {
			histogram.Observe(float64(i % 10))
		}
	case "summary.Observe":
		for i := 0; i < n; i++ {
			summary.Observe(float64(i % 10))
		}
	case "countervec.Inc":
		for i := 0; i < n; i++ {
			requests.WithLabelValues("GET").Inc()
		}
	case "func":
		acc := start
		for i := 0; i < n; i++ {
			acc = work(acc)
		}
		funcTotal = acc
	}
}

var funcTotal int

// paced makes n calls of op at rate calls per second: a millisecond's worth
// of calls at a time, then a sleep until they were due.
func paced(op string, n, start, rate int) {
	step := rate / 1000
	if step < 1 {
		step = 1
	}
	begin := time.Now()
	for done := 0; done < n; {
		k := step
		if k > n-done {
			k = n - done
		}
		loop(op, k, start+done)
		done += k
		due := begin.Add(time.Duration(float64(done) / float64(rate) * float64(time.Second)))
		if d := time.Until(due); d > 0 {
			time.Sleep(d)
		}
	}
}

var ops = []string{"counter.Inc", "counter.Add", "gauge.Add", "gauge.Sub", "gauge.Set",
	"histogram.Observe", "summary.Observe", "countervec.Inc", "func"}

func final(op string) (float64, error) {
	var m dto.Metric
	switch op {
	case "counter.Inc", "counter.Add":
		if err := counter.Write(&m); err != nil {
			return 0, err
		}
		return m.GetCounter().GetValue(), nil
	case "gauge.Add", "gauge.Sub", "gauge.Set":
		if err := gauge.Write(&m); err != nil {
			return 0, err
		}
		return m.GetGauge().GetValue(), nil
	case "histogram.Observe":
		if err := histogram.Write(&m); err != nil {
			return 0, err
		}
		return float64(m.GetHistogram().GetSampleCount()), nil
	case "summary.Observe":
		if err := summary.Write(&m); err != nil {
			return 0, err
		}
		return float64(m.GetSummary().GetSampleCount()), nil
	case "countervec.Inc":
		if err := requests.WithLabelValues("GET").Write(&m); err != nil {
			return 0, err
		}
		return m.GetCounter().GetValue(), nil
	}
	return float64(funcTotal), nil
}

type round struct {
	Op        string  `json:"op"`
	Calls     int     `json:"calls"`
	Ns        int64   `json:"ns"`
	NsPerCall float64 `json:"ns_per_call"`
}

type end struct {
	Final      float64 `json:"final"`
	CallsTotal int     `json:"calls_total"`
}

func known(op string) bool {
	for _, o := range ops {
		if o == op {
			return true
		}
	}
	return false
}

func main() {
	op := flag.String("op", "counter.Inc", fmt.Sprintf("what to call, one of %v", ops))
	n := flag.Int("n", 1000000, "calls per round")
	rounds := flag.Int("rounds", 5, "rounds")
	rate := flag.Int("rate", 0, "calls per second (0: as fast as it can)")
	flag.Parse()
	if !known(*op) || *n <= 0 || *rounds <= 0 || *rate < 0 {
		fmt.Fprintf(os.Stderr, "go-loop: -op is one of %v; -n and -rounds are positive, "+
			"-rate is not negative\n", ops)
		os.Exit(2)
	}

	// The default registry, as most services use: noop's mirror finds it in memory.
	reg := prometheus.DefaultRegisterer
	counter = prometheus.NewCounter(prometheus.CounterOpts{
		Name: "bench_counter", Help: "Updated by the counter ops."})
	gauge = prometheus.NewGauge(prometheus.GaugeOpts{
		Name: "bench_gauge", Help: "Updated by the gauge ops."})
	histogram = prometheus.NewHistogram(prometheus.HistogramOpts{
		Name: "bench_histogram", Help: "Updated by histogram.Observe.",
		Buckets: []float64{1, 2.5, 5, 7.5}})
	summary = prometheus.NewSummary(prometheus.SummaryOpts{
		Name: "bench_summary", Help: "Updated by summary.Observe.",
		Objectives: map[float64]float64{0.5: 0.05, 0.99: 0.001}})
	requests = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "bench_requests_total", Help: "Updated by countervec.Inc."}, []string{"method"})
	reg.MustRegister(counter, gauge, histogram, summary, requests)

	out := json.NewEncoder(os.Stdout)
	total := 0
	for r := 0; r < *rounds; r++ {
		begin := time.Now()
		if *rate > 0 {
			paced(*op, *n, total, *rate)
		} else {
			loop(*op, *n, total)
		}
		ns := time.Since(begin).Nanoseconds()
		total += *n
		if err := out.Encode(round{*op, *n, ns, float64(ns) / float64(*n)}); err != nil {
			fmt.Fprintln(os.Stderr, "go-loop:", err)
			os.Exit(1)
		}
	}
	value, err := final(*op)
	if err == nil {
		err = out.Encode(end{value, total})
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "go-loop:", err)
		os.Exit(1)
	}
}
