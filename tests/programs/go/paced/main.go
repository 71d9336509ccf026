// A client_golang program whose series move at known, steady paces, for noop top: each
// is brought, every millisecond, to what its pace says it should hold by then (so that
// its rate over any second is its pace, whatever the timer's jitter), and the program
// counts what it did itself.
//
//	hot_total                   Inc, 5,000 a second: the fastest
//	bulk_total                  Add(100), 10 times a second: moves 1,000 a second
//	warm_total                  Inc, 500 a second
//	requests_total{code="200"}  Inc, 300 a second (a CounterVec's children)
//	requests_total{code="500"}  Inc, 30 a second
//	level                       Set to 200 a second times the seconds since start
//	latency_seconds             Observe(0.25), 200 a second: the mean is 0.25
//	idle_total                  Add(7) once: never moves again
//
// The first line it writes is its pid, the second the address of its /metrics. Each
// line on stdin is answered with one JSON object: every count it made so far and the
// seconds since it started (its own clock), read at one instant.
package main

import (
	"bufio"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"os"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
)

var (
	hot = prometheus.NewCounter(prometheus.CounterOpts{Name: "hot_total",
		Help: "Incremented 5000 times a second."})
	bulk = prometheus.NewCounter(prometheus.CounterOpts{Name: "bulk_total",
		Help: "Added 100 to, 10 times a second."})
	warm = prometheus.NewCounter(prometheus.CounterOpts{Name: "warm_total",
		Help: "Incremented 500 times a second."})
	requests = prometheus.NewCounterVec(prometheus.CounterOpts{Name: "requests_total",
		Help: "Requests by code."}, []string{"code"})
	level = prometheus.NewGauge(prometheus.GaugeOpts{Name: "level",
		Help: "200 a second since start."})
	latency = prometheus.NewHistogram(prometheus.HistogramOpts{Name: "latency_seconds",
		Help: "Observes 0.25, 200 times a second.", Buckets: []float64{0.1, 0.5, 1}})
	idle = prometheus.NewCounter(prometheus.CounterOpts{Name: "idle_total",
		Help: "Never moves."})
)

type pace struct {
	name  string
	every float64 // updates a second
	do    func()
	done  uint64
}

func main() {
	prometheus.MustRegister(hot, bulk, warm, requests, level, latency, idle)
	ok, fail := requests.WithLabelValues("200"), requests.WithLabelValues("500")
	idle.Add(7)
	paces := []*pace{
		{name: "hot_total", every: 5000, do: hot.Inc},
		{name: "bulk_updates", every: 10, do: func() { bulk.Add(100) }},
		{name: "warm_total", every: 500, do: warm.Inc},
		{name: "requests_200", every: 300, do: ok.Inc},
		{name: "requests_500", every: 30, do: fail.Inc},
		{name: "latency_observations", every: 200, do: func() { latency.Observe(0.25) }},
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	fmt.Println(os.Getpid())
	fmt.Println(ln.Addr().String())
	go http.Serve(ln, promhttp.Handler())

	var mu sync.Mutex
	start := time.Now()
	go func() {
		for {
			mu.Lock()
			elapsed := time.Since(start).Seconds()
			for _, p := range paces {
				for want := uint64(elapsed * p.every); p.done < want; p.done++ {
					p.do()
				}
			}
			level.Set(float64(uint64(elapsed * 200)))
			mu.Unlock()
			time.Sleep(time.Millisecond)
		}
	}()
	in := bufio.NewScanner(os.Stdin)
	for in.Scan() {
		mu.Lock()
		out := map[string]float64{"seconds": time.Since(start).Seconds()}
		for _, p := range paces {
			out[p.name] = float64(p.done)
		}
		mu.Unlock()
		line, _ := json.Marshal(out)
		fmt.Println(string(line))
	}
}
