// procs puts a process collector of its own in place of the default registry's, as
// -how says, and serves that registry on /metrics: "namespace" (Namespace "shop"),
// "wrapped" (through WrapRegistererWithPrefix("edge_") and labels, one named as noop's
// target label), "custom" (a PidFn
// of its own: its parent's pid), "none" (no process collector at all); a counter
// beside it.
package main

import (
	"flag"
	"fmt"
	"net"
	"net/http"
	"os"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
)

func main() {
	how := flag.String("how", "namespace", "namespace, wrapped, custom or none")
	flag.Parse()
	reg := prometheus.DefaultRegisterer
	// the default one goes (a collector of the same Descs unregisters it)
	reg.Unregister(prometheus.NewProcessCollector(prometheus.ProcessCollectorOpts{}))
	switch *how {
	case "namespace":
		reg.MustRegister(prometheus.NewProcessCollector(
			prometheus.ProcessCollectorOpts{Namespace: "shop"}))
	case "wrapped":
		prometheus.WrapRegistererWith(prometheus.Labels{"zone": "a", "target": "edge"},
			prometheus.WrapRegistererWithPrefix("edge_", reg)).MustRegister(
			prometheus.NewProcessCollector(prometheus.ProcessCollectorOpts{}))
	case "custom":
		reg.MustRegister(prometheus.NewProcessCollector(prometheus.ProcessCollectorOpts{
			PidFn: func() (int, error) { return os.Getppid(), nil }}))
	}
	c := prometheus.NewCounter(prometheus.CounterOpts{Name: "procs_total", Help: "One."})
	c.Inc()
	reg.MustRegister(c)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	http.Handle("/metrics", promhttp.Handler())
	fmt.Printf("listening %s\n", ln.Addr())
	os.Stdout.Sync()
	http.Serve(ln, nil)
}
