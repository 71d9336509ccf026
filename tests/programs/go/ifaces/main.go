// ifaces passes and returns Go interface values: an error of several dynamic types
// (nil, *errors.errorString, *fmt.wrapError, a program's own *main.CodeError), an
// `any` holding a *main.Order, an int or nothing, and a map whose size changes. Each
// call prints one JSON line with what it passed and returned, so a test can compare
// what a probe read with what the program had.
package main

import (
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"os"
	"time"
)

type Order struct {
	ID  int
	Qty int
}

type CodeError struct {
	Code int
	Text string
}

func (e *CodeError) Error() string { return fmt.Sprintf("code %d: %s", e.Code, e.Text) }

var errEmpty = errors.New("empty order")

type seen struct {
	Call    int    `json:"call"`
	Kind    string `json:"kind"`
	Message string `json:"message"`
	Code    int    `json:"code"`
	Tags    int    `json:"tags"`
	Value   string `json:"value"`
	OrderID int    `json:"order_id"`
}

//go:noinline
func check(call int, v any, tags map[string]string) (int, error) {
	switch call % 4 {
	case 0:
		return call, nil
	case 1:
		return 0, errEmpty
	case 2:
		return 0, fmt.Errorf("call %d: %w", call, errEmpty)
	default:
		return 0, &CodeError{Code: 400 + call, Text: "bad"}
	}
}

func main() {
	calls := flag.Int("calls", 8, "calls to make")
	every := flag.Duration("every", 0, "pause between calls")
	flag.Parse()
	out := json.NewEncoder(os.Stdout)
	tags := map[string]string{}
	for i := 0; i < *calls; i++ {
		var v any
		s := seen{Call: i}
		switch i % 3 {
		case 0:
			v = &Order{ID: 100 + i, Qty: i}
			s.Value, s.OrderID = "*main.Order", 100+i
		case 1:
			v = i
			s.Value = "int"
		default:
			s.Value = "nil"
		}
		tags[fmt.Sprint("k", i%5)] = "x"
		s.Tags = len(tags)
		_, err := check(i, v, tags)
		switch e := err.(type) {
		case nil:
			s.Kind = "nil"
		case *CodeError:
			s.Kind, s.Code, s.Message = "*main.CodeError", e.Code, e.Error()
		default:
			s.Kind, s.Message = fmt.Sprintf("%T", err), err.Error()
		}
		_ = out.Encode(s)
		time.Sleep(*every)
	}
}
