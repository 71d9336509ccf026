// both keeps metrics with client_golang and with VictoriaMetrics/metrics at once: a
// client_golang counter both_cg_total (3) and a VictoriaMetrics/metrics counter
// both_vm_total (5), both on its /metrics. It prints "listening ADDR" and serves.
package main

import (
	"fmt"
	"net"
	"net/http"
	"os"

	vm "github.com/VictoriaMetrics/metrics"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
)

func main() {
	cg := prometheus.NewCounter(prometheus.CounterOpts{Name: "both_cg_total", Help: "c."})
	prometheus.MustRegister(cg)
	cg.Add(3)
	vm.NewCounter("both_vm_total").Add(5)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	http.HandleFunc("/metrics", func(w http.ResponseWriter, r *http.Request) {
		promhttp.Handler().ServeHTTP(w, r)
		vm.WritePrometheus(w, false)
	})
	fmt.Printf("listening %s\n", ln.Addr())
	http.Serve(ln, nil)
}
