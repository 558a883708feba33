package pickle

import "fmt"

// finishCopy finishes a value handed to caller code before the end of the
// pickle. It walks the value afresh (charging the walk to the element
// budget), so that a value handed over repeatedly cannot make decoding
// quadratic unnoticed.
func (d *Decoder) finishCopy(v any) (any, error) {
	f := finisher{d: d, state: map[any]int{}, charge: true}
	return f.finish(v)
}

// finisher turns the lists of a decoded value into []any, in place, and
// checks the result's nesting depth and that no container contains itself.
type finisher struct {
	d      *Decoder
	state  map[any]int // container -> height, or inProgress
	charge bool
}

const inProgress = -1

func (f *finisher) finish(v any) (any, error) {
	v, _, err := f.walk(v, 0)
	return v, err
}

// walk returns v finished and its height (0 for a scalar, 1 + the largest
// height of its elements for a container).
func (f *finisher) walk(v any, depth int) (any, int, error) {
	var id any
	switch x := v.(type) {
	case *list:
		id = x
	case *Dict:
		id = x
	case *Set:
		id = x
	case *Object:
		id = x
	case Tuple:
		if len(x) == 0 {
			return x, 1, nil
		}
		id = &x[0]
	case []any:
		if len(x) == 0 {
			return x, 1, nil
		}
		id = &x[0]
	default:
		return v, 0, nil
	}
	if h, ok := f.state[id]; ok {
		if h == inProgress {
			return nil, 0, &Error{Offset: f.d.start, Op: f.d.opName(), Msg: fmt.Sprintf("%s: a %s contains itself (recursive structures are not supported)", f.d.opName(), TypeName(v)), Err: ErrRecursive}
		}
		if l, ok := v.(*list); ok {
			return finishedList(l), h, nil
		}
		return v, h, nil
	}
	if depth >= f.d.opts.MaxDepth {
		return nil, 0, f.deep()
	}
	f.state[id] = inProgress
	height := 0
	each := func(e any) (any, error) {
		if f.charge {
			if err := f.d.charge(1); err != nil {
				return nil, err
			}
		}
		fe, h, err := f.walk(e, depth+1)
		if err != nil {
			return nil, err
		}
		height = max(height, h)
		return fe, nil
	}
	var err error
	switch x := v.(type) {
	case *list:
		for i := range x.items {
			if x.items[i], err = each(x.items[i]); err != nil {
				return nil, 0, err
			}
		}
		v = finishedList(x)
	case Tuple:
		for i := range x {
			if x[i], err = each(x[i]); err != nil {
				return nil, 0, err
			}
		}
	case []any:
		for i := range x {
			if x[i], err = each(x[i]); err != nil {
				return nil, 0, err
			}
		}
	case *Dict:
		for i := range x.items {
			it := &x.items[i]
			if it.Key, err = each(it.Key); err != nil {
				return nil, 0, err
			}
			if it.Value, err = each(it.Value); err != nil {
				return nil, 0, err
			}
		}
	case *Set:
		for i := range x.items {
			if x.items[i], err = each(x.items[i]); err != nil {
				return nil, 0, err
			}
		}
	case *Object:
		for i := range x.Args {
			if x.Args[i], err = each(x.Args[i]); err != nil {
				return nil, 0, err
			}
		}
		if x.State, err = each(x.State); err != nil {
			return nil, 0, err
		}
	}
	height++
	if height > f.d.opts.MaxDepth {
		return nil, 0, f.deep()
	}
	f.state[id] = height
	return v, height, nil
}

func (f *finisher) deep() error {
	return &Error{Offset: f.d.start, Op: f.d.opName(), Msg: fmt.Sprintf("%s: containers nested deeper than %d (Options.MaxDepth)", f.d.opName(), f.d.opts.MaxDepth), Err: ErrLimit}
}

// finishedList returns the []any of a finished list. An empty list gets
// its own (one-slot) backing array, so that distinct empty lists stay
// distinct and a shared one stays shared when pickled again.
func finishedList(l *list) []any {
	if cap(l.items) == 0 {
		l.items = make([]any, 0, 1)
	}
	return l.items
}
