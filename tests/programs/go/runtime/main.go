// A Go program without a metrics library that reports its own runtime numbers when
// asked: the test reads them from outside (noop) before and after each report.
//
// It reads commands on stdin, one per line, and answers each with one line:
//
//	alloc N      keep N more objects of 48 bytes and N/16 of 4 KiB (and drop half)
//	go N         start N more goroutines that wait forever
//	gc N         run the garbage collector N times
//	gogc P       debug.SetGCPercent(P)
//	limit B      debug.SetMemoryLimit(B)
//	procs N      runtime.GOMAXPROCS(N)
//	snap         read its runtime/metrics values, NumGoroutine, the thread count and
//	             debug.ReadGCStats (before anything is allocated) and answer "read"
//	memstats     runtime.ReadMemStats (which flushes every P's mcache), NumCgoCall and
//	             NumCPU, answered "read"
//	print        what the last snap and memstats read, as JSON
//
// The first line it writes is its pid. Nothing is allocated from the reading of a
// command to the answer to snap, so that noop's reads just before and just after see
// what the program read.
package main

import (
	"encoding/json"
	"fmt"
	"os"
	"runtime"
	"runtime/debug"
	"runtime/metrics"
	"strconv"
	"time"
)

var kept [][]byte
var ms runtime.MemStats
var cgoCalls int64
var ncpu int
var block = make(chan struct{})

func main() {
	var samples []metrics.Sample
	for _, d := range metrics.All() {
		if d.Kind == metrics.KindUint64 {
			samples = append(samples, metrics.Sample{Name: d.Name})
		}
	}
	metrics.Read(samples) // its first read sets the runtime's own tables up
	var stats debug.GCStats
	stats.Pause = make([]time.Duration, 0, 2*256+3)
	stats.PauseEnd = make([]time.Time, 0, 256)
	stats.PauseQuantiles = make([]time.Duration, 5)
	values := make([]uint64, len(samples))
	var goroutines, threads int
	ok, read := []byte("ok\n"), []byte("read\n")
	var buf [256]byte
	fmt.Println(os.Getpid())
	for {
		got, err := os.Stdin.Read(buf[:])
		if err != nil {
			return
		}
		line := buf[:got]
		for len(line) > 0 && (line[len(line)-1] == '\n' || line[len(line)-1] == ' ') {
			line = line[:len(line)-1]
		}
		word, n := line, 0
		for i, c := range line {
			if c == ' ' {
				word = line[:i]
				n, _ = strconv.Atoi(string(line[i+1:]))
				break
			}
		}
		switch string(word) {
		case "alloc":
			for i := 0; i < n; i++ {
				kept = append(kept, make([]byte, 48))
				if i%16 == 0 {
					kept = append(kept, make([]byte, 4096))
				}
			}
			kept = kept[len(kept)/2:]
		case "go":
			for i := 0; i < n; i++ {
				go func() { <-block }()
			}
		case "gc":
			for i := 0; i < n; i++ {
				runtime.GC()
			}
		case "gogc":
			debug.SetGCPercent(n)
		case "limit":
			debug.SetMemoryLimit(int64(n))
		case "procs":
			runtime.GOMAXPROCS(n)
		case "snap":
			// everything read before anything is allocated
			metrics.Read(samples)
			for i := range samples {
				values[i] = samples[i].Value.Uint64()
			}
			goroutines = runtime.NumGoroutine()
			threads, _ = runtime.ThreadCreateProfile(nil)
			debug.ReadGCStats(&stats)
			os.Stdout.Write(read)
			continue
		case "memstats":
			runtime.ReadMemStats(&ms)
			cgoCalls, ncpu = runtime.NumCgoCall(), runtime.NumCPU()
			os.Stdout.Write(read)
			continue
		case "print":
			out := map[string]interface{}{"goroutines": goroutines, "threads": threads,
				"numgc": stats.NumGC, "pause_total_ns": int64(stats.PauseTotal),
				"last_gc_unix_ns": stats.LastGC.UnixNano()}
			rm := map[string]uint64{}
			for i := range samples {
				rm[samples[i].Name] = values[i]
			}
			out["metrics"] = rm
			q := []int64{}
			for _, d := range stats.PauseQuantiles {
				q = append(q, int64(d))
			}
			out["quantiles"] = q
			out["memstats"] = map[string]uint64{"Alloc": ms.Alloc, "TotalAlloc": ms.TotalAlloc,
				"Sys": ms.Sys, "Lookups": ms.Lookups, "Mallocs": ms.Mallocs, "Frees": ms.Frees,
				"HeapAlloc": ms.HeapAlloc, "HeapSys": ms.HeapSys, "HeapIdle": ms.HeapIdle,
				"HeapInuse": ms.HeapInuse, "HeapReleased": ms.HeapReleased,
				"HeapObjects": ms.HeapObjects, "StackInuse": ms.StackInuse,
				"StackSys": ms.StackSys, "MSpanInuse": ms.MSpanInuse, "MSpanSys": ms.MSpanSys,
				"MCacheInuse": ms.MCacheInuse, "MCacheSys": ms.MCacheSys,
				"BuckHashSys": ms.BuckHashSys, "GCSys": ms.GCSys, "OtherSys": ms.OtherSys,
				"NextGC": ms.NextGC}
			out["gc_cpu_fraction"] = ms.GCCPUFraction
			out["numforcedgc"] = ms.NumForcedGC
			out["cgo_calls"] = cgoCalls
			out["ncpu"] = ncpu
			b, _ := json.Marshal(out)
			fmt.Println(string(b))
			continue
		}
		os.Stdout.Write(ok)
	}
}
