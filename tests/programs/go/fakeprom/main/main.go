// A program that updates a counter of the stand-in client_golang.
package main

import (
	"fmt"

	"github.com/prometheus/client_golang/prometheus"
)

func main() {
	c := prometheus.NewCounter()
	c.Inc()
	c.Add(2)
	fmt.Println(c)
}
