// Command layouts is a test target for noop's binary inspection.
//
// It defines structs whose layouts exercise every kind of Go member (sized
// integers with padding holes, floats, complex, strings, slices, arrays,
// maps, channels, interfaces, pointers, func values, embedded and nested
// structs, a generic struct) and out-of-line functions whose parameters
// cover the register ABI: integers that spill to the stack, strings and
// slices split over registers, floats in XMM registers, structs passed by
// value, arrays (always on the stack), a pointer receiver and several
// results. It also updates a few client_golang metrics so that their types
// are in the binary.
//
// Without arguments it exits at once; "layouts run" calls everything.
package main

import (
	"errors"
	"fmt"
	"os"

	"github.com/prometheus/client_golang/prometheus"
)

// Scalars mixes integer sizes so that the compiler leaves holes.
type Scalars struct {
	A int8
	B int64
	C int16
	D int32
	E uint8
	F uint64
	G bool
	H float32
	I float64
	J complex128
	K uint16
	L uintptr
}

// Shape is a non-empty interface.
type Shape interface {
	Area() float64
}

// Containers holds one member of each reference-like kind.
type Containers struct {
	Name   string
	Tags   []string
	Grid   [3][2]int32
	Index  map[string]int
	Events chan int
	Any    interface{}
	Sh     Shape
	Next   *Containers
	cb     func(int) error
	done   func()
	Bytes  [5]byte
	Flag   bool
}

// Point is a small all-float struct.
type Point struct {
	X, Y float64
}

// Area makes Point a Shape.
//
//go:noinline
func (p Point) Area() float64 {
	return p.X * p.Y
}

// Base is embedded in Order.
type Base struct {
	ID   uint32
	Kind uint8
}

// Item is one line of an Order.
type Item struct {
	SKU   string
	Qty   int32
	Price float64
}

// Order embeds Base and nests Point and an anonymous struct.
type Order struct {
	Base
	Origin Point
	Items  []Item
	Total  float64
	Note   string
	Paid   bool
	meta   struct {
		rev   int16
		stamp int64
	}
}

// Pair is a generic struct; its DWARF name carries the type arguments.
type Pair[K comparable, V any] struct {
	Key K
	Val V
	n   uint8
}

// Number is the constraint of sum.
type Number interface {
	int | float64
}

//go:noinline
func sum[T Number](xs []T) T {
	var total T
	for _, x := range xs {
		total += x
	}
	return total
}

// manyInts has more integer arguments than there are integer registers.
//
//go:noinline
func manyInts(a, b, c, d, e, f, g, h, i, j, k int) int {
	return a + 2*b + 3*c + 4*d + 5*e + 6*f + 7*g + 8*h + 9*i + 10*j + 11*k
}

// spill runs out of registers at a string, which goes to the stack whole.
//
//go:noinline
func spill(a, b, c, d, e, f, g, h int, s string) int {
	return a + b + c + d + e + f + g + h + len(s) + int(s[0])
}

// spillLen is spill using only the length of s. Go's DWARF then gives s
// one location without pieces, at the length word: 8 bytes too far.
//
//go:noinline
func spillLen(a, b, c, d, e, f, g, h int, s string) int {
	return a + b + c + d + e + f + g + h + len(s)
}

// mixed is the hand-worked ABI example: a=RAX, s=RBX+RCX, x=X0.
//
//go:noinline
func mixed(a int, s string, x float64) (int, error) {
	if x < 0 {
		return 0, errors.New(s)
	}
	return a + len(s) + int(x), nil
}

//go:noinline
func withStrings(s string, n int, t string) string {
	if n > len(s) {
		return t
	}
	return s[:n] + t
}

//go:noinline
func withSlices(xs []int, ys []string) (int, int) {
	total := 0
	for _, x := range xs {
		total += x
	}
	return total, len(ys)
}

//go:noinline
func floats(a float64, b float32, c int, d float64) float64 {
	return a + float64(b) + float64(c)*d
}

//go:noinline
func scale(p Point, by float64) Point {
	return Point{p.X * by, p.Y * by}
}

// bigByValue takes a struct too large for the registers.
//
//go:noinline
func bigByValue(o Order, limit int) int {
	return len(o.Items) + int(o.ID) + len(o.Note) + limit
}

//go:noinline
func arrays(a [2]int, b [1]int32, c int) int {
	return a[0] + a[1] + int(b[0]) + c
}

//go:noinline
func multi(a int8, b uint16, c int32, d bool) (int64, string, error) {
	if d {
		return int64(a) + int64(b) + int64(c), "yes", nil
	}
	return 0, "", fmt.Errorf("no: %d", a)
}

//go:noinline
func interfaces(e interface{}, s Shape, p *Point) float64 {
	if e == nil {
		return 0
	}
	return s.Area() + p.X
}

// AddItem is a method with a pointer receiver.
//
//go:noinline
func (o *Order) AddItem(it Item) (int, error) {
	if it.Qty <= 0 {
		return len(o.Items), errors.New("bad quantity")
	}
	o.Items = append(o.Items, it)
	o.Total += float64(it.Qty) * it.Price
	return len(o.Items), nil
}

//go:noinline
func describe(c *Containers, s Scalars, p Pair[string, int]) string {
	return fmt.Sprint(c.Name, s.B, p.Key, p.Val, len(c.Tags))
}

func main() {
	if len(os.Args) < 2 || os.Args[1] != "run" {
		return
	}
	counter := prometheus.NewCounter(prometheus.CounterOpts{Name: "layouts_calls_total", Help: "Calls."})
	gauge := prometheus.NewGauge(prometheus.GaugeOpts{Name: "layouts_level", Help: "Level."})
	hist := prometheus.NewHistogram(prometheus.HistogramOpts{Name: "layouts_size", Help: "Size."})
	reg := prometheus.NewRegistry()
	reg.MustRegister(counter, gauge, hist)

	o := &Order{Base: Base{ID: 7, Kind: 1}, Origin: Point{1, 2}, Note: "first"}
	o.meta.rev = 1
	o.meta.stamp = 2
	n, err := o.AddItem(Item{SKU: "apple", Qty: 3, Price: 0.5})
	counter.Inc()
	counter.Add(2)
	gauge.Add(float64(n))
	gauge.Set(4)
	hist.Observe(o.Total)

	c := &Containers{Name: "c", Tags: []string{"a"}, Index: map[string]int{"a": 1},
		Events: make(chan int, 1), Any: 3, Sh: Point{2, 3}}
	c.Next = c
	c.cb = func(int) error { return err }
	c.done = func() {}
	s := Scalars{A: 1, B: 2, J: complex(1, 2)}
	p := Pair[string, int]{Key: "k", Val: 1}

	total := manyInts(1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11)
	total += spill(1, 2, 3, 4, 5, 6, 7, 8, "spilled")
	total += spillLen(1, 2, 3, 4, 5, 6, 7, 8, "length")
	m, _ := mixed(1, "two", 3.0)
	total += m
	fmt.Println(withStrings("hello", 2, "world"))
	x, y := withSlices([]int{1, 2}, []string{"a"})
	fmt.Println(floats(1.5, 2.5, 3, 4.5), scale(Point{1, 2}, 2))
	fmt.Println(bigByValue(*o, 5), arrays([2]int{1, 2}, [1]int32{3}, 4))
	fmt.Println(multi(1, 2, 3, true))
	fmt.Println(interfaces(c.Any, c.Sh, &o.Origin))
	fmt.Println(sum([]int{1, 2, 3}), sum([]float64{1.5, 2.5}))
	fmt.Println(describe(c, s, p), total, x, y, c.cb(1), Point{1, 1}.Area())
	c.done()
}
