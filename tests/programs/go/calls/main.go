// calls: functions whose calls noop must see exactly once, entry and exit.
//
// Deep recursion through frames of three sizes (each Go stack-check form: small,
// over 128 bytes, over 4 KiB) on many goroutines, so goroutine stacks grow (each
// growth restarts a call at its entry) and the runtime moves them while calls are in
// progress; an account whose methods return results and change its state; a call
// whose duration is known. At the end it prints what it did, as JSON.
package main

import (
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"os"
	"runtime"
	"sync"
	"sync/atomic"
	"time"
)

var counts struct {
	Small, Medium, Huge, Deposit, Sleep, Bump int64
	BumpArgs                                  int64 // sum of bump's arguments
	SmallResults                              int64 // sum of the results of every small call
}

//go:noinline
func small(n int) int {
	atomic.AddInt64(&counts.Small, 1)
	if n == 0 {
		return 0
	}
	r := small(n-1) + 1
	atomic.AddInt64(&counts.SmallResults, int64(r))
	return r
}

//go:noinline
func touch(b []byte, n int) int {
	b[n%len(b)] = byte(n)
	return int(b[(n+1)%len(b)])
}

//go:noinline
func medium(n int) int {
	var buf [512]byte // a frame over 128 bytes: lea -N(rsp), r12; cmp; jbe
	atomic.AddInt64(&counts.Medium, 1)
	r := touch(buf[:], n)
	if n == 0 {
		return r
	}
	return medium(n-1) + r
}

//go:noinline
func huge(n int) int {
	var buf [6000]byte // a frame over 4 KiB: mov rsp, r12; sub; jb; cmp; jbe
	atomic.AddInt64(&counts.Huge, 1)
	r := touch(buf[:], n)
	if n == 0 {
		return r
	}
	return huge(n-1) + r
}

// bump is small enough for the compiler to inline where it is called directly.
func bump(n int) int {
	atomic.AddInt64(&counts.Bump, 1)
	atomic.AddInt64(&counts.BumpArgs, int64(n))
	return n + 1
}

// bumpFn calls bump's own, out-of-line code: a variable's value is not inlined.
var bumpFn = bump

//go:noinline
func bumpTwice(n int) int {
	return bump(bump(n)) // two more inlined copies
}

var scaled float64

//go:noinline
func note(s string) int { return len(s) }

// scale takes a float64 in xmm0, which a uprobe cannot read; Go spills it to the
// stack before the call to note, and DWARF says where it is after that.
//
//go:noinline
func scale(x float64, k int) float64 {
	note("scale")
	scaled += x * float64(k)
	return x * float64(k)
}

// Account is changed by Deposit; its methods have several returns.
type Account struct {
	ID      int64
	Balance int64
	Ops     int64
}

var errNegative = errors.New("negative deposit")

//go:noinline
func (a *Account) Deposit(amount int64) (balance int64, err error) {
	atomic.AddInt64(&counts.Deposit, 1)
	if amount < 0 {
		return a.Balance, errNegative
	}
	a.Balance += amount
	a.Ops++
	return a.Balance, nil
}

//go:noinline
func sleep(ms int) int {
	atomic.AddInt64(&counts.Sleep, 1)
	time.Sleep(time.Duration(ms) * time.Millisecond)
	return ms
}

func main() {
	goroutines := flag.Int("goroutines", 8, "goroutines recursing at once")
	depth := flag.Int("depth", 200, "recursion depth of each call tree")
	rounds := flag.Int("rounds", 20, "call trees per goroutine")
	seconds := flag.Float64("seconds", 0, "instead of -rounds: call trees until this long has passed")
	garbage := flag.Int("garbage", 0, "bytes of garbage each call tree allocates (drives the GC)")
	deposits := flag.Int("deposits", 1000, "deposits (every 10th is negative)")
	sleeps := flag.Int("sleeps", 5, "calls of sleep(ms)")
	sleepMs := flag.Int("sleep-ms", 20, "how long each sleep call sleeps")
	bumps := flag.Int("bumps", 100, "rounds of bump calls (inlined and not)")
	scales := flag.Int("scales", 10, "calls of scale(i + 0.5, i)")
	wait := flag.Bool("wait", false, "wait for a line on stdin before starting")
	flag.Parse()
	if *wait {
		fmt.Fprintln(os.Stderr, "calls: waiting")
		var line string
		fmt.Scanln(&line)
	}
	var wg sync.WaitGroup
	deadline := time.Now().Add(time.Duration(*seconds * float64(time.Second)))
	var trees int64
	for g := 0; g < *goroutines; g++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			var keep [][]byte
			for r := 0; ; r++ {
				if *seconds > 0 && !time.Now().Before(deadline) || *seconds <= 0 && r >= *rounds {
					return
				}
				// A fresh goroutine per tree starts with a small stack, so every tree
				// grows it again; the garbage keeps the GC busy meanwhile.
				done := make(chan struct{})
				go func() {
					small(*depth)
					medium(*depth / 4)
					huge(*depth / 20)
					close(done)
				}()
				if *garbage > 0 {
					keep = append(keep, make([]byte, *garbage))
					if len(keep) > 16 {
						keep = keep[1:]
					}
				}
				<-done
				atomic.AddInt64(&trees, 1)
				runtime.Gosched()
			}
		}()
	}
	wg.Wait()
	acct := &Account{ID: 7}
	errs := 0
	for i := 0; i < *deposits; i++ {
		amount := int64(i % 100)
		if i%10 == 9 {
			amount = -1
		}
		if _, err := acct.Deposit(amount); err != nil {
			errs++
		}
	}
	for i := 0; i < *sleeps; i++ {
		sleep(*sleepMs)
	}
	for i := 0; i < *scales; i++ {
		scale(float64(i)+0.5, i)
	}
	x := 0
	for i := 0; i < *bumps; i++ {
		x = bump(x)      // inlined
		x = bumpFn(x)    // out of line
		x = bumpTwice(x) // inlined twice
	}
	out, _ := json.Marshal(map[string]any{
		"small": counts.Small, "medium": counts.Medium, "huge": counts.Huge,
		"small_results": counts.SmallResults, "deposit": counts.Deposit,
		"deposit_errors": errs, "balance": acct.Balance, "ops": acct.Ops,
		"sleep": counts.Sleep, "sleep_ms": *sleepMs, "trees": trees,
		"gc_cycles": gcCycles(), "bump": counts.Bump, "bump_args": counts.BumpArgs,
	})
	fmt.Println(string(out))
}

func gcCycles() uint32 {
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return m.NumGC
}
