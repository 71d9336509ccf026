// allops calls every update method of client_golang's counter, gauge, histogram and
// summary (both kinds) that the preset's rules name (the exemplar ones too), on plain
// metrics and on *Vec children, once each per tick; after -ticks ticks it keeps serving
// /metrics for -linger. What noop reports of it is compared with that /metrics, and
// with the calls made (each metric's help says which method it gets, and how). Flags
// as examples/go-prometheus's: -listen, -period, -ticks, -linger.
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
	counterInc, counterAddWhole, counterAddFrac                    prometheus.Counter
	gaugeInc, gaugeDec, gaugeAdd, gaugeSub, gaugeSet, gaugeSetTime prometheus.Gauge
	histogram, histogramExemplar                                   prometheus.Histogram
	counterAddExemplar, counterAddExemplarFrac                     prometheus.Counter
	summary, summaryPlain                                          prometheus.Summary
	summaryVec, summaryPlainVec                                    *prometheus.SummaryVec
	counterVec                                                     *prometheus.CounterVec
	gaugeVec                                                       *prometheus.GaugeVec
	histogramVec                                                   *prometheus.HistogramVec
}

func counter(name, help string) prometheus.Counter {
	return prometheus.NewCounter(prometheus.CounterOpts{Name: name, Help: help})
}

func gauge(name, help string) prometheus.Gauge {
	return prometheus.NewGauge(prometheus.GaugeOpts{Name: name, Help: help})
}

func histogram(name, help string) prometheus.Histogram {
	return prometheus.NewHistogram(prometheus.HistogramOpts{Name: name, Help: help,
		Buckets: []float64{1, 2.5, 5}})
}

// summary has objectives (quantiles: Observe takes a lock and buffers the value);
// without objectives it counts with atomics, as a histogram does.
func summary(name, help string, objectives bool) prometheus.Summary {
	return prometheus.NewSummary(prometheus.SummaryOpts{Name: name, Help: help,
		Objectives: summaryObjectives(objectives)})
}

func summaryObjectives(on bool) map[float64]float64 {
	if !on {
		return nil
	}
	return map[float64]float64{0.5: 0.05, 0.9: 0.01}
}

func newMetrics(reg prometheus.Registerer) *metrics {
	m := &metrics{
		counterInc:         counter("ops_counter_inc", "Inc once per tick."),
		counterAddWhole:    counter("ops_counter_add_whole", "Add(3) once per tick."),
		counterAddFrac:     counter("ops_counter_add_frac", "Add(0.5) once per tick."),
		gaugeInc:           gauge("ops_gauge_inc", "Inc once per tick."),
		gaugeDec:           gauge("ops_gauge_dec", "Dec once per tick."),
		gaugeAdd:           gauge("ops_gauge_add", "Add(1.5) once per tick."),
		gaugeSub:           gauge("ops_gauge_sub", "Sub(2.5) once per tick."),
		gaugeSet:           gauge("ops_gauge_set", "Set(1.25 times the tick) once per tick."),
		gaugeSetTime:       gauge("ops_gauge_set_time", "SetToCurrentTime once per tick."),
		histogram:          histogram("ops_histogram", "Observe(tick mod 7) once per tick."),
		histogramExemplar:  histogram("ops_histogram_exemplar", "ObserveWithExemplar(tick mod 5) once per tick."),
		counterAddExemplar: counter("ops_counter_add_exemplar", "AddWithExemplar(2) once per tick."),
		counterAddExemplarFrac: counter("ops_counter_add_exemplar_frac",
			"AddWithExemplar(0.75) once per tick."),
		summary:      summary("ops_summary", "Observe(tick mod 6) once per tick.", true),
		summaryPlain: summary("ops_summary_plain", "Observe(tick mod 4 + 0.5) once per tick.", false),
		summaryVec: prometheus.NewSummaryVec(prometheus.SummaryOpts{
			Name: "ops_summary_vec", Help: "Observe(tick mod 9) on a child, once per tick.",
			Objectives: summaryObjectives(true)}, []string{"op"}),
		summaryPlainVec: prometheus.NewSummaryVec(prometheus.SummaryOpts{
			Name: "ops_summary_plain_vec", Help: "Observe(2.5) on a child, once per tick."},
			[]string{"op"}),
		counterVec: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "ops_counter_vec", Help: "Each op on its own child, once per tick."},
			[]string{"op"}),
		gaugeVec: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "ops_gauge_vec", Help: "Each op on its own child, once per tick."},
			[]string{"op"}),
		histogramVec: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name: "ops_histogram_vec", Help: "Observe(tick mod 3) on a child, once per tick.",
			Buckets: []float64{1, 2}}, []string{"op"}),
	}
	reg.MustRegister(m.counterInc, m.counterAddWhole, m.counterAddFrac, m.gaugeInc,
		m.gaugeDec, m.gaugeAdd, m.gaugeSub, m.gaugeSet, m.gaugeSetTime, m.histogram,
		m.histogramExemplar, m.counterVec, m.gaugeVec, m.histogramVec, m.counterAddExemplar,
		m.counterAddExemplarFrac, m.summary, m.summaryPlain, m.summaryVec, m.summaryPlainVec)
	return m
}

// tick makes every update once: 10 on plain metrics, 11 on children.
func (m *metrics) tick(n int) {
	m.counterInc.Inc()
	m.counterAddWhole.Add(3)
	m.counterAddFrac.Add(0.5)
	m.gaugeInc.Inc()
	m.gaugeDec.Dec()
	m.gaugeAdd.Add(1.5)
	m.gaugeSub.Sub(2.5)
	m.gaugeSet.Set(float64(n) * 1.25)
	m.gaugeSetTime.SetToCurrentTime()
	m.histogram.Observe(float64(n % 7))
	m.histogramExemplar.(prometheus.ExemplarObserver).ObserveWithExemplar(
		float64(n%5), prometheus.Labels{"tick": fmt.Sprint(n)})

	m.counterVec.WithLabelValues("inc").Inc()
	m.counterVec.WithLabelValues("add_whole").Add(2)
	m.counterVec.WithLabelValues("add_frac").Add(0.25)
	m.gaugeVec.WithLabelValues("inc").Inc()
	m.gaugeVec.WithLabelValues("dec").Dec()
	m.gaugeVec.WithLabelValues("add").Add(4)
	m.gaugeVec.WithLabelValues("sub").Sub(0.75)
	m.gaugeVec.WithLabelValues("set").Set(float64(n) * -2)
	m.gaugeVec.WithLabelValues("set_time").SetToCurrentTime()
	m.histogramVec.WithLabelValues("observe").Observe(float64(n % 3))
	m.histogramVec.WithLabelValues("exemplar").(prometheus.ExemplarObserver).ObserveWithExemplar(
		float64(n%4), prometheus.Labels{"tick": fmt.Sprint(n)})

	tick := prometheus.Labels{"tick": fmt.Sprint(n)}
	m.counterAddExemplar.(prometheus.ExemplarAdder).AddWithExemplar(2, tick)
	m.counterAddExemplarFrac.(prometheus.ExemplarAdder).AddWithExemplar(0.75, tick)
	m.counterVec.WithLabelValues("add_exemplar").(prometheus.ExemplarAdder).AddWithExemplar(1.25, tick)
	m.summary.Observe(float64(n % 6))
	m.summaryPlain.Observe(float64(n%4) + 0.5)
	m.summaryVec.WithLabelValues("observe").Observe(float64(n % 9))
	m.summaryPlainVec.WithLabelValues("observe").Observe(2.5)
}

func main() {
	listen := flag.String("listen", "127.0.0.1:0", "loopback address:port to serve /metrics on")
	period := flag.Duration("period", 30*time.Millisecond, "time between ticks")
	ticks := flag.Int("ticks", 23, "stop updating after this many ticks")
	linger := flag.Duration("linger", 0, "keep serving /metrics this long after the last tick")
	flag.Parse()
	if *period <= 0 || *ticks <= 0 {
		fmt.Fprintln(os.Stderr, "allops: -period and -ticks must be positive")
		os.Exit(2)
	}
	reg := prometheus.NewRegistry()
	m := newMetrics(reg)
	ln, err := net.Listen("tcp", *listen)
	if err != nil {
		fmt.Fprintf(os.Stderr, "allops: listen on %s: %v\n", *listen, err)
		os.Exit(1)
	}
	mux := http.NewServeMux()
	mux.Handle("/metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second}
	go func() {
		if err := srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			log.Fatalf("allops: serve: %v", err)
		}
	}()
	log.Printf("allops: pid %d serving http://%s/metrics", os.Getpid(), ln.Addr())

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	t := time.NewTicker(*period)
	defer t.Stop()
loop:
	for n := 1; n <= *ticks; n++ {
		select {
		case <-ctx.Done():
			break loop
		case <-t.C:
		}
		m.tick(n)
		log.Printf("allops: tick %d", n)
	}
	if *linger > 0 && ctx.Err() == nil {
		select {
		case <-ctx.Done():
		case <-time.After(*linger):
		}
	}
	shutdown, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	_ = srv.Shutdown(shutdown)
}
