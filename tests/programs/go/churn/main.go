// churn makes its metrics again for every request, as an exporter that builds a
// registry per probe does: each round creates a fresh registry with the same metric
// names, updates its metrics, gathers them (what such an exporter serves for that
// request) and drops them. Every -gc rounds it runs the garbage collector and returns
// memory to the OS, so that new metric objects take the addresses of freed ones.
//
// It starts its rounds on SIGUSR1 (or at once with -now), and prints at the end, as
// JSON on one line, the truth per (metric, labels): the value the latest round's
// object held, the updates made over all rounds and the sum of their increments;
// then it stays -linger long.
package main

import (
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"runtime"
	"runtime/debug"
	"sort"
	"strings"
	"syscall"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
)

type series struct {
	Name       string            `json:"name"`
	Labels     map[string]string `json:"labels"`
	Value      float64           `json:"value"`
	Updates    int               `json:"updates"`
	Increments float64           `json:"increments"`
}

type truth map[string]*series

func (t truth) add(name string, labels map[string]string, updates int, inc float64) {
	keys := make([]string, 0, len(labels))
	for k, v := range labels {
		keys = append(keys, k+"="+v)
	}
	sort.Strings(keys)
	key := name + "{" + strings.Join(keys, ",") + "}"
	s, ok := t[key]
	if !ok {
		s = &series{Name: name, Labels: labels}
		t[key] = s
	}
	s.Updates += updates
	s.Increments += inc
}

// value keeps what the round's registry served for each series as its latest value.
func (t truth) served(families []*dto.MetricFamily) {
	for _, f := range families {
		for _, m := range f.GetMetric() {
			labels := map[string]string{}
			keys := []string{}
			for _, p := range m.GetLabel() {
				labels[p.GetName()] = p.GetValue()
				keys = append(keys, p.GetName()+"="+p.GetValue())
			}
			sort.Strings(keys)
			s := t[f.GetName()+"{"+strings.Join(keys, ",")+"}"]
			if s == nil {
				continue
			}
			switch {
			case m.Counter != nil:
				s.Value = m.Counter.GetValue()
			case m.Gauge != nil:
				s.Value = m.Gauge.GetValue()
			case m.Histogram != nil:
				s.Value = float64(m.Histogram.GetSampleCount())
			}
		}
	}
}

var kinds = []string{"small", "medium", "large"}
var rooms = []string{"north", "south"}

// round is one request: a registry of its own, its metrics made, updated and gathered.
func round(i int, t truth) {
	reg := prometheus.NewRegistry()
	success := prometheus.NewGauge(prometheus.GaugeOpts{Name: "churn_probe_success",
		Help: "Set(1) on two rounds of three, Set(0) on the third."})
	duration := prometheus.NewGauge(prometheus.GaugeOpts{Name: "churn_probe_duration_seconds",
		Help: "Set(0.5 + round/1000)."})
	requests := prometheus.NewCounter(prometheus.CounterOpts{Name: "churn_requests_total",
		Help: "Inc() 1 + round mod 4 times."})
	bytes := prometheus.NewCounterVec(prometheus.CounterOpts{Name: "churn_bytes_total",
		Help: "Add(round mod 7) to one kind a round."}, []string{"kind"})
	temperature := prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "churn_temperature",
		Help: "Add(0.25) to one room a round."}, []string{"room"})
	latency := prometheus.NewHistogram(prometheus.HistogramOpts{Name: "churn_latency_seconds",
		Help: "Observe(round mod 5).", Buckets: []float64{1, 2, 4}})
	reg.MustRegister(success, duration, requests, bytes, temperature, latency)

	ok := 1.0
	if i%3 == 0 {
		ok = 0
	}
	// A Set's increment is the change it makes: each round's gauge starts at 0.
	success.Set(ok)
	t.add("churn_probe_success", map[string]string{}, 1, ok)
	duration.Set(0.5 + float64(i)/1000)
	t.add("churn_probe_duration_seconds", map[string]string{}, 1, 0.5+float64(i)/1000)
	for n := 0; n <= i%4; n++ {
		requests.Inc()
	}
	t.add("churn_requests_total", map[string]string{}, i%4+1, float64(i%4+1))
	kind := kinds[i%len(kinds)]
	bytes.WithLabelValues(kind).Add(float64(i % 7))
	t.add("churn_bytes_total", map[string]string{"kind": kind}, 1, float64(i%7))
	room := rooms[i%len(rooms)]
	temperature.WithLabelValues(room).Add(0.25)
	t.add("churn_temperature", map[string]string{"room": room}, 1, 0.25)
	latency.Observe(float64(i % 5))
	t.add("churn_latency_seconds", map[string]string{}, 1, 1) // one more observation

	families, err := reg.Gather()
	if err != nil {
		fmt.Fprintln(os.Stderr, "gather:", err)
		os.Exit(1)
	}
	t.served(families)
}

func main() {
	rounds := flag.Int("rounds", 2000, "requests to serve")
	gc := flag.Int("gc", 10, "run the GC and free memory every this many rounds")
	now := flag.Bool("now", false, "start at once, not on SIGUSR1")
	linger := flag.Duration("linger", 0, "stay this long after printing the truth")
	pace := flag.Duration("pace", 0, "pause this long after each round")
	flag.Parse()
	if !*now {
		go_ := make(chan os.Signal, 1)
		signal.Notify(go_, syscall.SIGUSR1)
		fmt.Println("ready")
		<-go_
	}
	t := truth{}
	for i := 1; i <= *rounds; i++ {
		round(i, t)
		time.Sleep(*pace)
		if *gc > 0 && i%*gc == 0 {
			runtime.GC()
			debug.FreeOSMemory()
		}
	}
	out := make([]*series, 0, len(t))
	for _, s := range t {
		out = append(out, s)
	}
	sort.Slice(out, func(a, b int) bool {
		return fmt.Sprint(out[a].Name, out[a].Labels) < fmt.Sprint(out[b].Name, out[b].Labels)
	})
	line, _ := json.Marshal(map[string]any{"rounds": *rounds, "series": out})
	fmt.Println(string(line))
	time.Sleep(*linger)
}
