// locals keeps values of each kind a line probe reads — strings, a slice, a struct,
// integers — live across calls, so that the compiler keeps them in stack slots (a
// string's pointer and length apart, or one in a register) as well as in registers.
// Each call of handle prints, per marked line (// at: NAME), one JSON line with every
// value it has made so far, so a test can compare what a probe read with what it had.
package main

import (
	"encoding/json"
	"flag"
	"os"
	"strings"
	"time"
)

type point struct {
	X, Y int
	Tag  string
}

var out = json.NewEncoder(os.Stdout)

type seen struct {
	At     string `json:"at"`
	Name   string `json:"name"`
	N      int    `json:"n"`
	Status string `json:"status"`
	Label  string `json:"label"`
	Parts  int    `json:"parts"`
	X      int    `json:"x"`
	Tag    string `json:"tag"`
	Total  int    `json:"total"`
}

//go:noinline
func report(s seen) { _ = out.Encode(s) }

//go:noinline
func handle(name string, n int) int {
	status := strings.Repeat("ok", n%3+1)
	report(seen{At: "status", Name: name, N: n, Status: status}) // at: status
	label := name + "-" + status
	report(seen{At: "label", Name: name, N: n, Status: status, Label: label}) // at: label
	parts := strings.Split(label, "-")
	p := point{X: n * 3, Y: len(parts), Tag: parts[len(parts)-1]}
	report(seen{At: "point", Name: name, N: n, Status: status, Label: label,
		Parts: len(parts), X: p.X, Tag: p.Tag}) // at: point
	total := p.X + p.Y + len(label)
	report(seen{At: "total", Name: name, N: n, Status: status, Label: label,
		Parts: len(parts), X: p.X, Tag: p.Tag, Total: total}) // at: total
	return total
}

func main() {
	calls := flag.Int("calls", 6, "calls of handle")
	wait := flag.Duration("wait", 0, "pause before the first call (a tracer attaches)")
	flag.Parse()
	time.Sleep(*wait)
	for i := 0; i < *calls; i++ {
		handle("svc", i)
	}
}
