// Command go-prometheus is the example service noop is tried on: a Go
// program that updates a fixed set of client_golang metrics on every tick
// and serves them on /metrics, so that what noop reads from its memory can
// be compared with what it says about itself.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log"
	"net"
	"net/http"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
)

type metrics struct {
	fakeCounter        prometheus.Counter
	anotherFakeCounter prometheus.Counter
	fakeGauge          prometheus.Gauge
	anotherFakeGauge   prometheus.Gauge
	subFakeGauge       prometheus.Gauge
	decFakeGauge       prometheus.Gauge
	setFakeGauge       prometheus.Gauge
	floatFakeCounter   prometheus.Counter
	intFakeCounter     prometheus.Counter
	fakeHistogram      prometheus.Histogram
	requests           *prometheus.CounterVec
	orders             *prometheus.CounterVec
}

func newMetrics(reg prometheus.Registerer) *metrics {
	m := &metrics{
		fakeCounter: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "fake_counter", Help: "Incremented once per tick.",
		}),
		anotherFakeCounter: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "another_fake_counter", Help: "Incremented twice per tick.",
		}),
		fakeGauge: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "fake_gauge", Help: "Inc once per tick.",
		}),
		anotherFakeGauge: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "another_fake_gauge", Help: "Add(5) once per tick.",
		}),
		subFakeGauge: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "sub_fake_gauge", Help: "Sub(7) once per tick.",
		}),
		decFakeGauge: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "dec_fake_gauge", Help: "Dec once per tick.",
		}),
		setFakeGauge: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "fake_set_gauge", Help: "Set to 1.5 times the tick number.",
		}),
		floatFakeCounter: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "fake_float_counter", Help: "Add(0.25) once per tick.",
		}),
		intFakeCounter: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "fake_int_counter", Help: "Add(3) once per tick.",
		}),
		fakeHistogram: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "fake_histogram",
			Help:    "Observes the tick number modulo 10 once per tick.",
			Buckets: []float64{1, 2.5, 5, 7.5},
		}),
		requests: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "fake_requests_total", Help: "Fake requests by method and code.",
		}, []string{"method", "code"}),
		orders: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "shop_orders_total", Help: "Orders placed, by customer.",
		}, []string{"customer"}),
	}
	reg.MustRegister(m.fakeCounter, m.anotherFakeCounter, m.fakeGauge,
		m.anotherFakeGauge, m.subFakeGauge, m.decFakeGauge, m.setFakeGauge,
		m.floatFakeCounter, m.intFakeCounter, m.fakeHistogram, m.requests, m.orders)
	return m
}

// methods and codes give the CounterVec a few children that change with
// the tick, so that label values are exercised and not constant.
var (
	methods = []string{"GET", "POST"}
	codes   = []string{"200", "404", "500"}
)

// An order is what a real service would handle; placeOrder gives probes a
// function with strings, slices and nested structs to read (see probes.yaml).
type item struct {
	SKU string
	Qty int
}

type order struct {
	ID       int64
	Customer string
	Items    []item
}

var customers = []string{"acme", "globex", "initech"}

//go:noinline
func placeOrder(o *order) int {
	total := 0
	for _, it := range o.Items {
		total += it.Qty
	}
	return total
}

func (m *metrics) tick(n int) {
	o := &order{ID: int64(n), Customer: customers[n%len(customers)],
		Items: []item{{SKU: "sku-1", Qty: n}, {SKU: "sku-2", Qty: 2 * n}}}
	placeOrder(o)
	m.orders.WithLabelValues(o.Customer).Inc() // what a spec on placeOrder counts too
	m.fakeCounter.Inc()
	m.anotherFakeCounter.Inc()
	m.anotherFakeCounter.Inc()
	m.fakeGauge.Inc()
	m.anotherFakeGauge.Add(5)
	m.subFakeGauge.Sub(7)
	m.decFakeGauge.Dec()
	m.setFakeGauge.Set(float64(n) * 1.5)
	m.floatFakeCounter.Add(0.25)
	m.intFakeCounter.Add(3)
	m.fakeHistogram.Observe(float64(n % 10))
	m.requests.WithLabelValues(methods[n%len(methods)], codes[n%len(codes)]).Inc()
}

func main() {
	listen := flag.String("listen", "127.0.0.1:9091", "loopback address:port to serve /metrics on")
	period := flag.Duration("period", time.Second, "time between ticks")
	ticks := flag.Int("ticks", 0, "stop after this many ticks (0: run until signalled)")
	linger := flag.Duration("linger", 0, "keep serving /metrics this long after the last tick")
	hold := flag.Bool("hold", false, "wait for SIGUSR1 before the first tick (a tracer attaches first)")
	flag.Parse()
	if *period <= 0 {
		fmt.Fprintln(os.Stderr, "go-prometheus: -period must be positive")
		os.Exit(2)
	}

	reg := prometheus.NewRegistry()
	m := newMetrics(reg)

	ln, err := net.Listen("tcp", *listen)
	if err != nil {
		fmt.Fprintf(os.Stderr, "go-prometheus: listen on %s: %v\n", *listen, err)
		os.Exit(1)
	}
	mux := http.NewServeMux()
	mux.Handle("/metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second}
	go func() {
		if err := srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			log.Fatalf("go-prometheus: serve: %v", err)
		}
	}()
	log.Printf("go-prometheus: pid %d serving http://%s/metrics, tick every %s",
		os.Getpid(), ln.Addr(), *period)

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if *hold {
		start := make(chan os.Signal, 1)
		signal.Notify(start, syscall.SIGUSR1)
		log.Printf("go-prometheus: holding until SIGUSR1")
		select {
		case <-ctx.Done():
		case <-start:
		}
		signal.Stop(start)
	}
	t := time.NewTicker(*period)
	defer t.Stop()
loop:
	for n := 1; *ticks == 0 || n <= *ticks; n++ {
		select {
		case <-ctx.Done():
			break loop // signalled: shut down now
		case <-t.C:
		}
		m.tick(n)
		log.Printf("go-prometheus: tick %d", n)
	}
	if *linger > 0 && ctx.Err() == nil {
		select {
		case <-ctx.Done():
		case <-time.After(*linger):
		}
	}
	shutdownCtx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	_ = srv.Shutdown(shutdownCtx)
}
