// members makes and deletes the children of a CounterVec, and registers and
// unregisters counters, in a sequence drawn from a seed, while it is scraped: each
// step changes one member, then counts itself in a step counter that GET /step
// answers. A child or counter made for id i is given the value i+1 (the value says
// whose it is), so a value read from another object's memory shows.
//
// The sequence: a xorshift64* generator from -seed; each step draws r, and id is
// r % ids. Every -every'th step is a collector's: id's is unregistered if it is
// registered, else made and registered (an even id's a counter, an odd id's a
// CounterVec with one child, labelled id). The other steps are children's: id's child is
// deleted if it exists, else made. A step waits -pace first (0: none). -steps ends the
// sequence (0: never); after it the program waits. With -exec-after D the process
// becomes /bin/sleep after D (an exec: the same pid, another program). With -collide
// A,B the children of ids 0 and 1 are labelled A and B instead: two values whose hashes
// collide, so that both are in one entry of the CounterVec's map (a slice of two).
package main

import (
	"flag"
	"fmt"
	"net"
	"net/http"
	"os"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
)

var step uint64

type rng struct{ s uint64 }

func (r *rng) next() uint64 {
	r.s ^= r.s >> 12
	r.s ^= r.s << 25
	r.s ^= r.s >> 27
	return r.s * 2685821657736338717
}

func main() {
	seed := flag.Uint64("seed", 1, "the sequence's seed (not 0)")
	ids := flag.Int("ids", 64, "ids drawn")
	every := flag.Int("every", 16, "every this many steps, a counter's")
	pace := flag.Duration("pace", 200*time.Microsecond, "wait before each step")
	steps := flag.Uint64("steps", 0, "steps to make (0: no end)")
	execAfter := flag.Duration("exec-after", 0, "then exec /bin/sleep in its place (0: never)")
	collide := flag.String("collide", "", "A,B: the labels of ids 0 and 1")
	flag.Parse()
	label := func(id int) string {
		if pair := strings.Split(*collide, ","); len(pair) == 2 && id < 2 {
			return pair[id]
		}
		return strconv.Itoa(id)
	}
	reg := prometheus.DefaultRegisterer // a global holds it: the mirror finds it alone
	vec := prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "members_total", Help: "One child an id, made and deleted."}, []string{"id"})
	reg.MustRegister(vec)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	http.Handle("/metrics", promhttp.Handler())
	http.HandleFunc("/step", func(w http.ResponseWriter, _ *http.Request) {
		fmt.Fprintln(w, atomic.LoadUint64(&step))
	})
	go http.Serve(ln, nil)
	fmt.Printf("listening %s\n", ln.Addr())
	os.Stdout.Sync()
	if *execAfter > 0 {
		go func() {
			time.Sleep(*execAfter)
			syscall.Exec("/bin/sleep", []string{"sleep", "60"}, os.Environ())
		}()
	}
	r := rng{*seed}
	children := make(map[int]bool)
	counters := make(map[int]prometheus.Collector)
	for n := uint64(1); *steps == 0 || n <= *steps; n++ {
		if *pace > 0 {
			time.Sleep(*pace)
		}
		id := int(r.next() % uint64(*ids))
		name := strconv.Itoa(id)
		if n%uint64(*every) == 0 {
			if c, ok := counters[id]; ok {
				reg.Unregister(c)
				delete(counters, id)
			} else if id%2 == 0 {
				c := prometheus.NewCounter(prometheus.CounterOpts{
					Name: "members_extra_" + name + "_total", Help: "A counter an id."})
				c.Add(float64(id + 1))
				reg.MustRegister(c)
				counters[id] = c
			} else { // an odd id's: a *Vec of one child
				v := prometheus.NewCounterVec(prometheus.CounterOpts{
					Name: "members_extra_" + name + "_total", Help: "A *Vec an id."},
					[]string{"id"})
				v.WithLabelValues(name).Add(float64(id + 1))
				reg.MustRegister(v)
				counters[id] = v
			}
		} else if children[id] {
			vec.DeleteLabelValues(label(id))
			delete(children, id)
		} else {
			vec.WithLabelValues(label(id)).Add(float64(id + 1))
			children[id] = true
		}
		atomic.StoreUint64(&step, n)
	}
	select {}
}
