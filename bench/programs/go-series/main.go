// go-series registers -series metric objects on the default registry, as a large
// service would: a third of them the children of ten CounterVecs, the rest counters
// and gauges of their own, every tenth of those a histogram of five buckets. Each is
// updated once; then it serves /metrics and prints "listening ADDR".
package main

import (
	"flag"
	"fmt"
	"net"
	"net/http"
	"os"
	"strconv"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
)

func main() {
	series := flag.Int("series", 10000, "metric objects")
	flag.Parse()
	children := *series / 3
	vecs := make([]*prometheus.CounterVec, 10)
	for i := range vecs {
		vecs[i] = prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: fmt.Sprintf("bench_requests_%d_total", i), Help: "Requests, by path."},
			[]string{"path", "code"})
		prometheus.MustRegister(vecs[i])
	}
	for c := 0; c < children; c++ {
		vecs[c%10].WithLabelValues("/api/v1/item/"+strconv.Itoa(c), "200").Add(float64(c))
	}
	for i := 0; i < *series-children; i++ {
		name := "bench_object_" + strconv.Itoa(i)
		switch {
		case i%10 == 9:
			h := prometheus.NewHistogram(prometheus.HistogramOpts{Name: name + "_seconds",
				Help: "A histogram.", Buckets: []float64{0.01, 0.1, 1, 10, 100}})
			prometheus.MustRegister(h)
			h.Observe(float64(i % 50))
		case i%2 == 0:
			c := prometheus.NewCounter(prometheus.CounterOpts{Name: name + "_total",
				Help: "A counter."})
			prometheus.MustRegister(c)
			c.Add(float64(i))
		default:
			g := prometheus.NewGauge(prometheus.GaugeOpts{Name: name, Help: "A gauge."})
			prometheus.MustRegister(g)
			g.Set(float64(i) / 3)
		}
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	fmt.Printf("listening %s\n", ln.Addr())
	os.Stdout.Sync()
	http.Handle("/metrics", promhttp.Handler())
	if err := http.Serve(ln, nil); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
}
