// hostile does, in a tight loop, what a program may do to memory a reader outside it
// has learnt: it makes and deletes the children of a CounterVec and registers and
// unregisters counters and histograms, each of whose label value or help lives in a
// page of its own, mapped for it and unmapped once the object is deleted (mapped
// again soon, at the same address, for another); it runs the garbage collector and
// returns memory to the system every -gc steps, so that new objects take the freed
// ones' addresses; and it maps and unmaps a larger region all along. An object made
// for id i holds i+1 (a child, a counter) or one observation of i+1 (a histogram):
// its value says whose it is. After -exit-after it exits; after -exec-after it
// becomes /bin/sleep (the same pid, another program). It prints "ready" once its
// first objects exist.
package main

import (
	"flag"
	"fmt"
	"os"
	"reflect"
	"runtime"
	"runtime/debug"
	"strconv"
	"syscall"
	"time"
	"unsafe"

	"github.com/prometheus/client_golang/prometheus"
)

// paged is a string whose bytes are in a page mapped for it alone.
type paged struct {
	s    string
	page []byte
}

func newPaged(text string) paged {
	page, err := syscall.Mmap(-1, 0, 4096, syscall.PROT_READ|syscall.PROT_WRITE,
		syscall.MAP_ANON|syscall.MAP_PRIVATE)
	if err != nil {
		panic(err)
	}
	copy(page, text)
	var s string
	h := (*reflect.StringHeader)(unsafe.Pointer(&s))
	h.Data, h.Len = uintptr(unsafe.Pointer(&page[0])), len(text)
	return paged{s, page}
}

func (p paged) unmap() {
	if err := syscall.Munmap(p.page); err != nil {
		panic(err)
	}
}

type rng struct{ s uint64 }

func (r *rng) next() uint64 {
	r.s ^= r.s >> 12
	r.s ^= r.s << 25
	r.s ^= r.s >> 27
	return r.s * 2685821657736338717
}

type collector struct {
	c    prometheus.Collector
	help paged
}

func main() {
	ids := flag.Int("ids", 48, "ids drawn")
	gc := flag.Int("gc", 500, "every this many steps, a garbage collection")
	exitAfter := flag.Duration("exit-after", 0, "then exit (0: never)")
	execAfter := flag.Duration("exec-after", 0, "then exec /bin/sleep (0: never)")
	flag.Parse()
	reg := prometheus.DefaultRegisterer // a global holds it
	vec := prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "hostile_total", Help: "One child an id."}, []string{"id"})
	reg.MustRegister(vec)
	start := time.Now()
	r := rng{0x2545F4914F6CDD1D}
	children := make(map[int]paged)
	collectors := make(map[int]collector)
	var big []byte
	for n := 1; ; n++ {
		if n == 4*(*ids) {
			fmt.Println("ready")
			os.Stdout.Sync()
		}
		if n%64 == 0 {
			since := time.Since(start)
			if *exitAfter > 0 && since > *exitAfter {
				os.Exit(0)
			}
			if *execAfter > 0 && since > *execAfter {
				syscall.Exec("/bin/sleep", []string{"sleep", "60"}, os.Environ())
			}
			if big != nil {
				syscall.Munmap(big)
				big = nil
			} else {
				big, _ = syscall.Mmap(-1, 0, 1<<20, syscall.PROT_READ|syscall.PROT_WRITE,
					syscall.MAP_ANON|syscall.MAP_PRIVATE)
			}
		}
		if n%*gc == 0 {
			runtime.GC()
			debug.FreeOSMemory()
		}
		id := int(r.next() % uint64(*ids))
		if n%8 == 0 {
			if c, ok := collectors[id]; ok {
				reg.Unregister(c.c)
				delete(collectors, id)
				c.help.unmap()
				continue
			}
			// the name stays in the heap: the registry keeps it after Unregister
			name := "hostile_" + strconv.Itoa(id) + "_total"
			help := newPaged("Of id " + strconv.Itoa(id) + ".")
			var c prometheus.Collector
			if id%2 == 0 {
				k := prometheus.NewCounter(prometheus.CounterOpts{Name: name, Help: help.s})
				k.Add(float64(id + 1))
				c = k
			} else {
				h := prometheus.NewHistogram(prometheus.HistogramOpts{Name: name,
					Help: help.s, Buckets: []float64{1, 10, 100}})
				h.Observe(float64(id + 1))
				c = h
			}
			if err := reg.Register(c); err != nil {
				help.unmap()
				continue
			}
			collectors[id] = collector{c, help}
			continue
		}
		if label, ok := children[id]; ok {
			vec.DeleteLabelValues(label.s)
			delete(children, id)
			label.unmap()
		} else {
			label := newPaged(strconv.Itoa(id))
			vec.WithLabelValues(label.s).Add(float64(id + 1))
			children[id] = label
		}
	}
}
