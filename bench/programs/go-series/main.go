// go-series registers -series metric objects on the default registry, as a large
// service would: a third of them the children of ten CounterVecs, the rest counters
// and gauges of their own, every tenth of those a histogram of five buckets. Each is
// updated once; then it serves /metrics and prints "listening ADDR". With -move, every
// object is updated again every 100 ms (each value moves between any two reads).
package main

import (
	"flag"
	"fmt"
	"net"
	"net/http"
	"os"
	"strconv"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
)

func main() {
	series := flag.Int("series", 10000, "metric objects")
	move := flag.Bool("move", false, "update every object every 100 ms")
	flag.Parse()
	var updates []func()
	children := *series / 3
	vecs := make([]*prometheus.CounterVec, 10)
	for i := range vecs {
		vecs[i] = prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: fmt.Sprintf("bench_requests_%d_total", i), Help: "Requests, by path."},
			[]string{"path", "code"})
		prometheus.MustRegister(vecs[i])
	}
	for c := 0; c < children; c++ {
		child := vecs[c%10].WithLabelValues("/api/v1/item/"+strconv.Itoa(c), "200")
		child.Add(float64(c))
		updates = append(updates, child.Inc)
	}
	for i := 0; i < *series-children; i++ {
		name := "bench_object_" + strconv.Itoa(i)
		switch {
		case i%10 == 9:
			h := prometheus.NewHistogram(prometheus.HistogramOpts{Name: name + "_seconds",
				Help: "A histogram.", Buckets: []float64{0.01, 0.1, 1, 10, 100}})
			prometheus.MustRegister(h)
			h.Observe(float64(i % 50))
			updates = append(updates, func() { h.Observe(1) })
		case i%2 == 0:
			c := prometheus.NewCounter(prometheus.CounterOpts{Name: name + "_total",
				Help: "A counter."})
			prometheus.MustRegister(c)
			c.Add(float64(i))
			updates = append(updates, c.Inc)
		default:
			g := prometheus.NewGauge(prometheus.GaugeOpts{Name: name, Help: "A gauge."})
			prometheus.MustRegister(g)
			g.Set(float64(i) / 3)
			updates = append(updates, g.Inc)
		}
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	if *move {
		go func() {
			for range time.Tick(100 * time.Millisecond) {
				for _, u := range updates {
					u()
				}
			}
		}()
	}
	fmt.Printf("listening %s\n", ln.Addr())
	os.Stdout.Sync()
	http.Handle("/metrics", promhttp.Handler())
	if err := http.Serve(ln, nil); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
}
