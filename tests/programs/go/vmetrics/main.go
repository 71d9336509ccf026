// vmetrics keeps its metrics with VictoriaMetrics/metrics, every kind of them, for the
// tests of noop's mirror of that library: counters (made up front and on the fly by
// GetOrCreateCounter, labels in their names), float counters, histograms whose
// observations fall in many decades and below and above every bucket, summaries
// (default quantiles and their own, their window), a callback gauge, a second
// registered Set and one its handler writes without registering it. It makes them,
// updates them, prints "listening ADDR" and serves metrics.WritePrometheus with the
// library's go_* and process_* series, WriteFDMetrics and the unregistered Set on
// /metrics, and one of each update on GET /bump; with -churn it goes on updating them (and
// making new series) every millisecond; with -members it runs tests/test_members.py's
// sequence instead, with -hostile tests/test_hostile.py's loop.
package main

import (
	"flag"
	"fmt"
	"math"
	"net"
	"net/http"
	"os"
	"reflect"
	"runtime"
	"runtime/debug"
	"strings"
	"sync/atomic"
	"syscall"
	"time"
	"unsafe"

	"github.com/VictoriaMetrics/metrics"
)

// listen serves /metrics (every registered Set, then also) on a loopback port and
// says where: "listening ADDR".
func listen(also ...*metrics.Set) net.Listener {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	http.HandleFunc("/metrics", func(w http.ResponseWriter, _ *http.Request) {
		metrics.WritePrometheus(w, true)
		metrics.WriteFDMetrics(w)
		for _, s := range also {
			s.WritePrometheus(w)
		}
	})
	fmt.Printf("listening %s\n", ln.Addr())
	return ln
}

// members runs tests/programs/go/members' sequence with this library: a step every
// -pace makes or unregisters one counter, id's child members_total{id="ID"} or, every
// -every'th step, members_extra_ID_total (an odd id's labelled id="ID"), each holding
// id+1; GET /step answers the steps made.
func members(seed uint64, ids, every int, pace time.Duration) {
	var step uint64
	http.HandleFunc("/step", func(w http.ResponseWriter, _ *http.Request) {
		fmt.Fprintln(w, atomic.LoadUint64(&step))
	})
	go http.Serve(listen(), nil)
	s := seed
	held := map[string]bool{}
	for n := uint64(1); ; n++ {
		if pace > 0 {
			time.Sleep(pace)
		}
		s ^= s >> 12
		s ^= s << 25
		s ^= s >> 27
		id := int((s * 2685821657736338717) % uint64(ids))
		name := fmt.Sprintf(`members_total{id="%d"}`, id)
		if n%uint64(every) == 0 {
			name = fmt.Sprintf("members_extra_%d_total", id)
			if id%2 == 1 {
				name = fmt.Sprintf(`members_extra_%d_total{id="%d"}`, id, id)
			}
		}
		if held[name] {
			metrics.UnregisterMetric(name)
			delete(held, name)
		} else {
			metrics.GetOrCreateCounter(name).Add(id + 1)
			held[name] = true
		}
		atomic.StoreUint64(&step, n)
	}
}

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
	var s string // its header made by hand: Go 1.19 has no unsafe.String
	h := (*reflect.StringHeader)(unsafe.Pointer(&s))
	h.Data, h.Len = uintptr(unsafe.Pointer(&page[0])), len(text)
	return paged{s, page}
}

// hostile does what tests/programs/go/hostile does, with this library: in a tight loop
// it makes and unregisters counters named hostile_total{id="ID"} (holding id+1) and,
// every 8th step, hostile_ID_total (a counter holding id+1, an even id) or
// hostile_ID_seconds (a histogram with one observation of id+1, an odd id), each name
// in a page of its own, unmapped once it is unregistered; it collects garbage and
// returns memory every -gc steps and maps and unmaps a larger region all along; it
// prints "ready" once its first objects exist, and exits or becomes /bin/sleep when
// told.
func hostile(ids, gc int, exitAfter, execAfter time.Duration) {
	start := time.Now()
	s := uint64(0x2545F4914F6CDD1D)
	held := map[string]paged{}
	var big []byte
	for n := 1; ; n++ {
		if n == 4*ids {
			fmt.Println("ready")
			os.Stdout.Sync()
		}
		if n%64 == 0 {
			since := time.Since(start)
			if exitAfter > 0 && since > exitAfter {
				os.Exit(0)
			}
			if execAfter > 0 && since > execAfter {
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
		if n%gc == 0 {
			runtime.GC()
			debug.FreeOSMemory()
		}
		s ^= s >> 12
		s ^= s << 25
		s ^= s >> 27
		id := int((s * 2685821657736338717) % uint64(ids))
		text := fmt.Sprintf(`hostile_total{id="%d"}`, id)
		if n%8 == 0 {
			text = fmt.Sprintf("hostile_%d_total", id)
			if id%2 == 1 {
				text = fmt.Sprintf("hostile_%d_seconds", id)
			}
		}
		if name, ok := held[text]; ok {
			metrics.UnregisterMetric(name.s)
			delete(held, text)
			name.unmap()
			continue
		}
		name := newPaged(text)
		if strings.HasSuffix(text, "_seconds") {
			metrics.GetOrCreateHistogram(name.s).Update(float64(id + 1))
		} else {
			metrics.GetOrCreateCounter(name.s).Add(id + 1)
		}
		held[text] = name
	}
}

func (p paged) unmap() {
	if err := syscall.Munmap(p.page); err != nil {
		panic(err)
	}
}

func main() {
	churn := flag.Bool("churn", false, "keep updating")
	hostileMode := flag.Bool("hostile", false, "run the hostile loop instead")
	gc := flag.Int("gc", 500, "-hostile: every this many steps, a garbage collection")
	exitAfter := flag.Duration("exit-after", 0, "-hostile: then exit (0: never)")
	execAfter := flag.Duration("exec-after", 0, "-hostile: then exec /bin/sleep (0: never)")
	member := flag.Bool("members", false, "run the members sequence instead")
	seed := flag.Uint64("seed", 1, "-members: the sequence's seed (not 0)")
	ids := flag.Int("ids", 64, "-members: ids drawn")
	every := flag.Int("every", 16, "-members: every this many steps, an extra counter")
	pace := flag.Duration("pace", 200*time.Microsecond, "-members: wait before each step")
	flag.Parse()
	if *member {
		members(*seed, *ids, *every, *pace)
	}
	if *hostileMode {
		hostile(48, *gc, *exitAfter, *execAfter)
	}

	requests := metrics.NewCounter(`vm_requests_total{path="/api",code="200"}`)
	requests.Add(41)
	requests.Inc()
	for i := 0; i < 20; i++ {
		metrics.GetOrCreateCounter(fmt.Sprintf(`vm_items_total{item="%d"}`, i)).Add(i * 3)
	}
	bare := metrics.NewCounter("vm_bare_total")
	bare.Set(1 << 40)
	float := metrics.NewFloatCounter(`vm_bytes_total{dir="in"}`)
	float.Add(1.5)
	float.Add(0.25)
	big := metrics.NewFloatCounter("vm_big_total")
	big.Add(1234567.875)
	hist := metrics.NewHistogram(`vm_latency_seconds{handler="/q"}`)
	for _, v := range []float64{0, 1e-12, 0.001, 0.0015, 0.02, 0.5, 0.5, 1, 3.7, 42, 1e5, 1e19, math.NaN(), -1} {
		hist.Update(v)
	}
	plain := metrics.NewHistogram("vm_sizes_bytes")
	for i := 1; i <= 200; i++ {
		plain.Update(float64(i * i))
	}
	metrics.NewHistogram("vm_empty_seconds") // no observation: nothing written
	sum := metrics.NewSummary(`vm_duration_seconds{op="read"}`)
	for i := 1; i <= 1500; i++ { // past the 1,000 samples kept: reservoir sampling
		sum.Update(float64(i%97) / 10)
	}
	own := metrics.NewSummaryExt("vm_own_seconds", 10*time.Minute, []float64{0.25, 0.75})
	for i := 0; i < 10; i++ {
		own.Update(float64(i))
	}
	metrics.NewGauge(`vm_goroutines_now`, func() float64 { return 7 })
	set := metrics.NewSet()
	metrics.RegisterSet(set)
	set.NewCounter(`vm_set_total{set="second"}`).Add(9)
	set.NewHistogram("vm_set_seconds").Update(0.3)
	local := metrics.NewSet() // not registered: written by the handler itself
	local.NewCounter(`vm_local_total{set="local"}`).Add(5)
	local.NewFloatCounter("vm_local_float_total").Add(2.5)

	// GET /bump: one of each update, the same every time (tests/test_mirror_vm.py's
	// BUMP), a counter made on the fly among them; the negative observation is none
	http.HandleFunc("/bump", func(w http.ResponseWriter, _ *http.Request) {
		requests.Inc()
		requests.Inc()
		requests.Add(5)
		requests.Dec()
		bare.Set(7)
		float.Add(0.5)
		float.Sub(0.25)
		float.Set(10)
		hist.Update(0.25)
		hist.Update(-1)
		hist.Update(2)
		sum.Update(4)
		own.Update(1)
		metrics.GetOrCreateCounter(`vm_bumped_total{n="1"}`).Inc()
		fmt.Fprintln(w, "bumped")
	})
	ln := listen(local)
	if *churn {
		// each observes 1, 10,000 times a second: read at one instant, its sum is its
		// count
		ones := metrics.NewHistogram("vm_ones")
		onesSummary := metrics.NewSummary("vm_ones_summary")
		go func() {
			for {
				ones.Update(1)
				onesSummary.Update(1)
				time.Sleep(100 * time.Microsecond)
			}
		}()
		go func() {
			for i := 0; ; i++ {
				requests.Inc()
				float.Add(0.5)
				hist.Update(float64(i%1000) / 100)
				sum.Update(float64(i % 13))
				metrics.GetOrCreateCounter(fmt.Sprintf(`vm_churn_total{n="%d"}`, i%5000)).Inc()
				time.Sleep(time.Millisecond)
			}
		}()
	}
	if err := http.Serve(ln, nil); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
}
