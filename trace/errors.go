package trace

import (
	"errors"
	"fmt"
	"strings"
)

// ShapeError is a trace-time error: an op got inputs it cannot accept. It
// names the module path, the op and the input shapes.
type ShapeError struct {
	Module string
	Op     string
	Inputs []Meta
	Err    error
}

func (e *ShapeError) Error() string {
	var b strings.Builder
	if e.Module != "" {
		fmt.Fprintf(&b, "module %s: ", e.Module)
	}
	fmt.Fprintf(&b, "%s", e.Op)
	if len(e.Inputs) > 0 {
		b.WriteString("(")
		for i, m := range e.Inputs {
			if i > 0 {
				b.WriteString(", ")
			}
			b.WriteString(m.String())
		}
		b.WriteString(")")
	}
	fmt.Fprintf(&b, ": %v", e.Err)
	return b.String()
}

func (e *ShapeError) Unwrap() error { return e.Err }

// ErrShape is matched by errors.Is for every *ShapeError.
var ErrShape = errors.New("shape error")

// Is lets errors.Is(err, ErrShape) match.
func (e *ShapeError) Is(target error) bool { return target == ErrShape }

// Capture runs f, turning a *ShapeError panic raised while tracing into an
// error. Other panics propagate: they are bugs, not bad input.
func Capture(f func()) (err error) {
	defer func() {
		if r := recover(); r != nil {
			if se, ok := r.(*ShapeError); ok {
				err = se
				return
			}
			panic(r)
		}
	}()
	f()
	return nil
}

// Errorf panics with a *ShapeError in graph g's current module; ops and
// modules use it for checks that Infer cannot express.
func (g *Graph) Errorf(op string, inputs []*Tensor, format string, args ...any) {
	metas := make([]Meta, len(inputs))
	for i, t := range inputs {
		metas[i] = t.Meta
	}
	panic(&ShapeError{Module: g.Module(), Op: op, Inputs: metas, Err: fmt.Errorf(format, args...)})
}
