// vmetrics keeps its metrics with VictoriaMetrics/metrics, every kind of them, for the
// tests of noop's mirror of that library: counters (made up front and on the fly by
// GetOrCreateCounter, labels in their names), float counters, histograms whose
// observations fall in many decades and below and above every bucket, summaries
// (default quantiles and their own, their window), a callback gauge, a second
// registered Set and one its handler writes without registering it. It makes them,
// updates them, prints "listening ADDR" and serves metrics.WritePrometheus (and the
// unregistered Set) on /metrics; with -churn it goes on updating them (and
// making new series) every millisecond; with -members it runs tests/test_members.py's
// sequence instead.
package main

import (
	"flag"
	"fmt"
	"math"
	"net"
	"net/http"
	"os"
	"sync/atomic"
	"time"

	"github.com/VictoriaMetrics/metrics"
)

// members runs tests/programs/go/members' sequence with this library: a step every
// -pace makes or unregisters one counter, id's child members_total{id="ID"} or, every
// -every'th step, members_extra_ID_total (an odd id's labelled id="ID"), each holding
// id+1; GET /step answers the steps made.
func members(seed uint64, ids, every int, pace time.Duration) {
	var step uint64
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	http.HandleFunc("/metrics", func(w http.ResponseWriter, _ *http.Request) {
		metrics.WritePrometheus(w, false)
	})
	http.HandleFunc("/step", func(w http.ResponseWriter, _ *http.Request) {
		fmt.Fprintln(w, atomic.LoadUint64(&step))
	})
	fmt.Printf("listening %s\n", ln.Addr())
	go http.Serve(ln, nil)
	s := seed
	held := map[string]bool{}
	for n := uint64(1); ; n++ {
		if pace > 0 {
			time.Sleep(pace)
		}
		s ^= s >> 12
		s ^= s << 25
		s ^= s >> 27
		id := int((s * 2685821657736338717) % uint64(ids))
		name := fmt.Sprintf(`members_total{id="%d"}`, id)
		if n%uint64(every) == 0 {
			name = fmt.Sprintf("members_extra_%d_total", id)
			if id%2 == 1 {
				name = fmt.Sprintf(`members_extra_%d_total{id="%d"}`, id, id)
			}
		}
		if held[name] {
			metrics.UnregisterMetric(name)
			delete(held, name)
		} else {
			metrics.GetOrCreateCounter(name).Add(id + 1)
			held[name] = true
		}
		atomic.StoreUint64(&step, n)
	}
}

func main() {
	churn := flag.Bool("churn", false, "keep updating")
	member := flag.Bool("members", false, "run the members sequence instead")
	seed := flag.Uint64("seed", 1, "-members: the sequence's seed (not 0)")
	ids := flag.Int("ids", 64, "-members: ids drawn")
	every := flag.Int("every", 16, "-members: every this many steps, an extra counter")
	pace := flag.Duration("pace", 200*time.Microsecond, "-members: wait before each step")
	flag.Parse()
	if *member {
		members(*seed, *ids, *every, *pace)
	}

	requests := metrics.NewCounter(`vm_requests_total{path="/api",code="200"}`)
	requests.Add(41)
	requests.Inc()
	for i := 0; i < 20; i++ {
		metrics.GetOrCreateCounter(fmt.Sprintf(`vm_items_total{item="%d"}`, i)).Add(i * 3)
	}
	bare := metrics.NewCounter("vm_bare_total")
	bare.Set(1 << 40)
	float := metrics.NewFloatCounter(`vm_bytes_total{dir="in"}`)
	float.Add(1.5)
	float.Add(0.25)
	big := metrics.NewFloatCounter("vm_big_total")
	big.Add(1234567.875)
	hist := metrics.NewHistogram(`vm_latency_seconds{handler="/q"}`)
	for _, v := range []float64{0, 1e-12, 0.001, 0.0015, 0.02, 0.5, 0.5, 1, 3.7, 42, 1e5, 1e19, math.NaN(), -1} {
		hist.Update(v)
	}
	plain := metrics.NewHistogram("vm_sizes_bytes")
	for i := 1; i <= 200; i++ {
		plain.Update(float64(i * i))
	}
	metrics.NewHistogram("vm_empty_seconds") // no observation: nothing written
	sum := metrics.NewSummary(`vm_duration_seconds{op="read"}`)
	for i := 1; i <= 1500; i++ { // past the 1,000 samples kept: reservoir sampling
		sum.Update(float64(i%97) / 10)
	}
	own := metrics.NewSummaryExt("vm_own_seconds", 10*time.Minute, []float64{0.25, 0.75})
	for i := 0; i < 10; i++ {
		own.Update(float64(i))
	}
	metrics.NewGauge(`vm_goroutines_now`, func() float64 { return 7 })
	set := metrics.NewSet()
	metrics.RegisterSet(set)
	set.NewCounter(`vm_set_total{set="second"}`).Add(9)
	set.NewHistogram("vm_set_seconds").Update(0.3)
	local := metrics.NewSet() // not registered: written by the handler itself
	local.NewCounter(`vm_local_total{set="local"}`).Add(5)
	local.NewFloatCounter("vm_local_float_total").Add(2.5)

	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	http.HandleFunc("/metrics", func(w http.ResponseWriter, _ *http.Request) {
		metrics.WritePrometheus(w, false)
		local.WritePrometheus(w)
	})
	fmt.Printf("listening %s\n", ln.Addr())
	if *churn {
		go func() {
			for i := 0; ; i++ {
				requests.Inc()
				float.Add(0.5)
				hist.Update(float64(i%1000) / 100)
				sum.Update(float64(i % 13))
				metrics.GetOrCreateCounter(fmt.Sprintf(`vm_churn_total{n="%d"}`, i%5000)).Inc()
				time.Sleep(time.Millisecond)
			}
		}()
	}
	if err := http.Serve(ln, nil); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
}
