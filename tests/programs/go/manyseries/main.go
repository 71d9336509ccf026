// manyseries gives one CounterVec more label values than noop's preset keeps rows
// for in the kernel, each child incremented a known number of times and kept alive,
// then prints the number of increments and waits: every one of them must be
// accounted for by noop, in a series or in its overflow count.
package main

import (
	"flag"
	"fmt"
	"os"
	"strconv"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

func main() {
	series := flag.Int("series", 6000, "label values (children) to make")
	each := flag.Int("each", 3, "increments of each child")
	pace := flag.Duration("pace", time.Millisecond, "pause after each new child")
	linger := flag.Duration("linger", time.Minute, "stay this long after the last update")
	flag.Parse()
	reg := prometheus.NewRegistry()
	vec := prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "many_requests_total", Help: "Requests, by id."}, []string{"id"})
	reg.MustRegister(vec)
	kept := make([]prometheus.Counter, 0, *series)
	for i := 0; i < *series; i++ {
		c := vec.WithLabelValues(strconv.Itoa(i))
		kept = append(kept, c)
		for j := 0; j < *each; j++ {
			c.Inc()
		}
		time.Sleep(*pace)
	}
	fmt.Println(*series * *each)
	os.Stdout.Sync()
	time.Sleep(*linger)
	_ = kept
}
