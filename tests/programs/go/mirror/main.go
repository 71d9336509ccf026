// mirror registers one of each kind of client_golang collector on the default
// registry (and through a registerer that wraps it with a prefix and labels), updates
// them a known number of times, serves /metrics, and waits: what noop reads of its
// metrics from its memory is compared with what it serves.
//
// With -rounds N it makes N rounds of updates at start, then one more round on each
// SIGUSR1; on SIGUSR2 it drops metrics (a summary unregistered, a *Vec child deleted,
// another *Vec reset and given a new child), runs the garbage collector and makes
// metric objects of the same sizes that may take the freed addresses; -vec sets how many children each *Vec gets; -listen the address. With
// -format it only reads float64 bits (hex, one a line) on stdin and writes each as Go
// writes a number in the text format (strconv.FormatFloat(v, 'g', -1, 64)). With -local
// the metrics go to a registry only main holds, served by promhttp.HandlerFor, and each
// GET of /probe makes a registry of its own, gathers it twice (for a page of recent
// probes, and for its answer) and drops it, as the blackbox exporter does for each probe.
package main

import (
	"bufio"
	"flag"
	"fmt"
	"log"
	"math"
	"net"
	"net/http"
	"os"
	"os/signal"
	"runtime"
	"runtime/debug"
	"strconv"
	"syscall"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
)

type metrics struct {
	counter    prometheus.Counter
	floatCtr   prometheus.Counter
	gauge      prometheus.Gauge
	histogram  prometheus.Histogram
	summary    prometheus.Summary
	plainSum   prometheus.Summary
	requests   *prometheus.CounterVec
	temps      *prometheus.GaugeVec
	latency    *prometheus.HistogramVec
	sizes      *prometheus.SummaryVec
	wrapped    prometheus.Counter
	wrappedVec *prometheus.CounterVec
	constLabel prometheus.Gauge
	odd        *prometheus.GaugeVec // label values as they come: quotes, backslashes, ...
}

func register(reg prometheus.Registerer) *metrics {
	wrap := prometheus.WrapRegistererWith(prometheus.Labels{"zone": "a"},
		prometheus.WrapRegistererWithPrefix("inner_", reg))
	m := &metrics{
		counter:   prometheus.NewCounter(prometheus.CounterOpts{Name: "mirror_calls_total", Help: "Calls."}),
		floatCtr:  prometheus.NewCounter(prometheus.CounterOpts{Name: "mirror_seconds_total", Help: "Seconds."}),
		gauge:     prometheus.NewGauge(prometheus.GaugeOpts{Name: "mirror_level", Help: "Level."}),
		histogram: prometheus.NewHistogram(prometheus.HistogramOpts{Name: "mirror_latency_seconds", Help: "Latency.", Buckets: []float64{0.5, 1, 2.5, 5}}),
		summary: prometheus.NewSummary(prometheus.SummaryOpts{Name: "mirror_size_bytes", Help: "Sizes.",
			Objectives: map[float64]float64{0.5: 0.05, 0.9: 0.01}}),
		plainSum: prometheus.NewSummary(prometheus.SummaryOpts{Name: "mirror_wait_seconds", Help: "Waits."}),
		requests: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "mirror_requests_total", Help: "Requests.",
			ConstLabels: prometheus.Labels{"service": "mirror"}}, []string{"method", "code"}),
		temps:      prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "mirror_temperature", Help: "Temps."}, []string{"room"}),
		latency:    prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: "mirror_op_seconds", Help: "Ops.", Buckets: []float64{0.1, 1}}, []string{"op"}),
		sizes:      prometheus.NewSummaryVec(prometheus.SummaryOpts{Name: "mirror_item_bytes", Help: "Items."}, []string{"kind"}),
		wrapped:    prometheus.NewCounter(prometheus.CounterOpts{Name: "wrapped_total", Help: "Wrapped."}),
		wrappedVec: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "wrapped_ops_total", Help: "Wrapped ops."}, []string{"op"}),
		constLabel: prometheus.NewGauge(prometheus.GaugeOpts{Name: "mirror_info", Help: "Info.", ConstLabels: prometheus.Labels{"version": "1.2.3"}}),
		odd:        prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "mirror_odd_labels", Help: "Odd \\ help\nlines."}, []string{"v"}),
	}
	reg.MustRegister(m.counter, m.floatCtr, m.gauge, m.histogram, m.summary, m.plainSum,
		m.requests, m.temps, m.latency, m.sizes, m.constLabel, m.odd)
	wrap.MustRegister(m.wrapped, m.wrappedVec)
	reg.MustRegister(prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "mirror_goroutines", Help: "Goroutines."},
		func() float64 { return float64(runtime.NumGoroutine()) }))
	return m
}

func (m *metrics) round(r, children int) {
	m.counter.Inc()
	m.floatCtr.Add(0.25)
	m.gauge.Set(float64(r) * 1.5)
	m.histogram.Observe(float64(r%7) * 0.9)
	m.summary.Observe(float64(r % 100))
	m.plainSum.Observe(float64(r%5) / 4)
	for c := 0; c < children; c++ {
		m.requests.WithLabelValues([]string{"GET", "POST", "PUT"}[c%3], fmt.Sprint(200+c)).Inc()
		m.temps.WithLabelValues(fmt.Sprintf("room%d", c)).Set(float64(r + c))
		m.latency.WithLabelValues(fmt.Sprintf("op%d", c)).Observe(float64(r%3) * 0.4)
		m.sizes.WithLabelValues(fmt.Sprintf("k%d", c)).Observe(float64(r + c))
		m.wrappedVec.WithLabelValues(fmt.Sprintf("w%d", c)).Add(2)
	}
	m.wrapped.Inc()
	m.constLabel.Set(1)
	for i, v := range []string{`q"uote`, `back\slash`, "new\nline", "tab\there", "ünï ☃", "", "cr\rhere"} {
		m.odd.WithLabelValues(v).Set(float64(i))
	}
}

func main() {
	rounds := flag.Int("rounds", 10, "rounds of updates at start")
	children := flag.Int("vec", 3, "children of each *Vec")
	listen := flag.String("listen", "127.0.0.1:0", "address to serve /metrics on")
	format := flag.Bool("format", false, "format float64 bits from stdin, one a line")
	local := flag.Bool("local", false, "a registry only main holds, and /probe")
	flag.Parse()
	if *format {
		in := bufio.NewScanner(os.Stdin)
		for in.Scan() {
			bits, err := strconv.ParseUint(in.Text(), 16, 64)
			if err != nil {
				log.Fatal(err)
			}
			fmt.Println(strconv.FormatFloat(math.Float64frombits(bits), 'g', -1, 64))
		}
		return
	}
	var reg prometheus.Registerer = prometheus.DefaultRegisterer
	handler := promhttp.Handler()
	if *local {
		own := prometheus.NewRegistry()
		reg, handler = own, promhttp.HandlerFor(own, promhttp.HandlerOpts{})
		http.HandleFunc("/probe", func(w http.ResponseWriter, r *http.Request) {
			once := prometheus.NewRegistry()
			made := prometheus.NewCounter(prometheus.CounterOpts{Name: "probe_made_total", Help: "Made."})
			made.Inc()
			once.MustRegister(made)
			if _, err := once.Gather(); err != nil { // the probe's history, kept apart
				log.Print(err)
			}
			promhttp.HandlerFor(once, promhttp.HandlerOpts{}).ServeHTTP(w, r)
		})
	}
	m := register(reg)
	r := 0
	for ; r < *rounds; r++ {
		m.round(r, *children)
	}
	ln, err := net.Listen("tcp", *listen)
	if err != nil {
		log.Fatal(err)
	}
	http.Handle("/metrics", handler)
	go http.Serve(ln, nil)
	fmt.Printf("listening %s\n", ln.Addr())
	os.Stdout.Sync()
	more := make(chan os.Signal, 1)
	signal.Notify(more, syscall.SIGUSR1, syscall.SIGUSR2, syscall.SIGTERM)
	var kept []prometheus.Metric // the objects made after a drop, held to keep their addresses
	for s := range more {
		if s == syscall.SIGTERM {
			return
		}
		if s == syscall.SIGUSR2 {
			reg.Unregister(m.plainSum)
			m.temps.DeleteLabelValues("room0")
			m.requests.Reset()
			m.requests.WithLabelValues("NEW", "201").Add(7)
			runtime.GC()
			debug.FreeOSMemory()
			for i := 0; i < 1000; i++ {
				c := prometheus.NewCounter(prometheus.CounterOpts{Name: "x", Help: "x"})
				c.Add(float64(i))
				kept = append(kept, c, prometheus.NewSummary(prometheus.SummaryOpts{Name: "y", Help: "y"}))
			}
			fmt.Println("dropped", len(kept))
			os.Stdout.Sync()
			continue
		}
		m.round(r, *children)
		r++
		fmt.Println("round")
		os.Stdout.Sync()
	}
}
