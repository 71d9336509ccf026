// rebuilt: built twice by tests/test_rebuild.py, from this file as it is and with
// every "Alpha" written "Beta" and one more function before the others (so that the
// second build's code sits at other addresses). Each build calls work from a function
// named after it, with a value of a type named after it, -calls times.
package main

import (
	"flag"
	"fmt"
	"time"
)

type Alpha struct{ n int }

//go:noinline
func work(v any) int {
	if t, ok := v.(*Alpha); ok {
		return t.n
	}
	return -1
}

//go:noinline
func callAlpha(n int) int {
	s := 0
	for i := 0; i < n; i++ {
		s += work(&Alpha{i})
	}
	return s
}

func main() {
	calls := flag.Int("calls", 5, "calls of work")
	wait := flag.Duration("wait", 0, "how long to wait before calling")
	flag.Parse()
	time.Sleep(*wait)
	fmt.Println(callAlpha(*calls))
}
