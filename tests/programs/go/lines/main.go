// lines runs one function through the shapes a line probe meets: a for header the
// compiler duplicates, a condition with &&, a branch taken for some items only, and a
// helper inlined into its caller. Each round it prints, per item, one JSON line with
// what it computed, so a test can compare what a probe read with what the program had.
// Lines a test names carry a marker comment (// at: NAME).
package main

import (
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"time"
)

type Order struct {
	ID    int
	Qty   int
	Price int
}

type seen struct {
	Round    int  `json:"round"`
	ID       int  `json:"id"`
	Cost     int  `json:"cost"`
	Clamped  int  `json:"clamped"`
	Accepted bool `json:"accepted"`
}

var out = json.NewEncoder(os.Stdout)

// clamp is small enough to be inlined into process.
func clamp(v, lo, hi int) int {
	if v < lo { // at: clamp-low
		return lo
	}
	if v > hi {
		return hi
	}
	return v
}

//go:noinline
func process(round int, orders []Order, limit int) int {
	total := 0
	rejected := 0
	for i := 0; i < len(orders); i++ { // at: for
		o := &orders[i]
		cost := o.Qty * o.Price // at: cost
		clamped := clamp(cost, 0, limit) // at: clamp-call
		if o.Qty > 0 && cost < limit { // at: and
			total += clamped // at: accepted
		} else {
			rejected++ // at: rejected
		}
		_ = out.Encode(seen{round, o.ID, cost, clamped, o.Qty > 0 && cost < limit})
	}
	return total + rejected // at: return
}

func orders(round int) []Order {
	n := 3 + round%3
	got := make([]Order, n)
	for i := range got {
		got[i] = Order{ID: round*10 + i, Qty: (round + i) % 4, Price: 7 + i*13}
	}
	return got
}

func main() {
	rounds := flag.Int("rounds", 1, "rounds to run (0: until killed)")
	every := flag.Duration("every", 0, "pause between rounds")
	limit := flag.Int("limit", 60, "the cost above which an order is rejected")
	flag.Parse()
	for r := 0; *rounds == 0 || r < *rounds; r++ {
		total := process(r, orders(r), *limit) // at: call-process
		fmt.Fprintf(os.Stderr, "round %d total %d\n", r, total)
		time.Sleep(*every)
	}
}
