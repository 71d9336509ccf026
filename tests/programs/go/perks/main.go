// perks answers quantile queries on beorn7/perks' targeted streams, as client_golang's
// summaries make them: each line of stdin is a command, and each query's answers go to
// stdout as float64 bits in hex, one line each.
//
//	t Q E Q E ...   a new stream, targeted at quantiles Q with errors E (bits in hex)
//	i V             insert the value V (bits in hex)
//	q Q             the stream's answer for quantile Q (bits in hex)
//	c               the stream's count (decimal)
package main

import (
	"bufio"
	"fmt"
	"math"
	"os"
	"strconv"
	"strings"

	"github.com/beorn7/perks/quantile"
)

func bits(s string) float64 {
	b, err := strconv.ParseUint(s, 16, 64)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(2)
	}
	return math.Float64frombits(b)
}

func main() {
	in := bufio.NewScanner(os.Stdin)
	in.Buffer(make([]byte, 1<<20), 1<<20)
	out := bufio.NewWriter(os.Stdout)
	defer out.Flush()
	var s *quantile.Stream
	for in.Scan() {
		f := strings.Fields(in.Text())
		if len(f) == 0 {
			continue
		}
		switch f[0] {
		case "t":
			targets := map[float64]float64{}
			for i := 1; i+1 < len(f); i += 2 {
				targets[bits(f[i])] = bits(f[i+1])
			}
			s = quantile.NewTargeted(targets)
		case "i":
			s.Insert(bits(f[1]))
		case "q":
			fmt.Fprintf(out, "%x\n", math.Float64bits(s.Query(bits(f[1]))))
		case "c":
			fmt.Fprintf(out, "%d\n", s.Count())
		}
	}
}
