package pickle

import "fmt"

// Constructor builds the value of an allowed class from the arguments a
// pickle gives it: the argument tuple of REDUCE (cls(*args)), NEWOBJ and
// NEWOBJ_EX (cls.__new__(cls, *args)), OBJ and INST. The arguments are
// plain decoded values. A Constructor must not trust them: they come from
// the pickle.
type Constructor func(args []any) (any, error)

// Record returns a Constructor that builds an *Object recording the class
// and its arguments, so that a pickle naming the class can be read (and
// its arguments inspected) without any code for it.
func Record(class string) Constructor {
	return func(args []any) (any, error) {
		return &Object{Class: class, Args: args}, nil
	}
}

// OrderedDict is a Constructor for collections.OrderedDict, which builds a
// *Dict; allow it with Allow: map[string]Constructor{
// "collections.OrderedDict": pickle.OrderedDict}.
func OrderedDict(args []any) (any, error) {
	d := NewDict()
	switch len(args) {
	case 0:
		return d, nil
	case 1:
		pairs, ok := args[0].([]any)
		if !ok {
			if t, isTuple := args[0].(Tuple); isTuple {
				pairs, ok = []any(t), true
			}
		}
		if !ok {
			return nil, fmt.Errorf("OrderedDict argument is a %s, want a list of pairs", TypeName(args[0]))
		}
		for _, p := range pairs {
			kv, ok := p.(Tuple)
			if !ok || len(kv) != 2 {
				return nil, fmt.Errorf("OrderedDict item is a %s, want a (key, value) tuple", TypeName(p))
			}
			h, err := new(keyer).hash(kv[0])
			if err != nil {
				return nil, err
			}
			if s, ok := h.(string); ok {
				d.set(s, kv[1], nil)
			} else {
				d.set(kv[0], kv[1], h)
			}
		}
		return d, nil
	}
	return nil, fmt.Errorf("OrderedDict takes at most 1 argument, got %d", len(args))
}

// SetStater is implemented by values a Constructor returns that accept
// BUILD (Python's __setstate__ or instance dict update).
type SetStater interface {
	SetState(state any) error
}

// py2Modules maps Python 2 module names to Python 3's, as the unpickler's
// fix_imports does for protocols 0 to 2.
var py2Modules = map[string]string{
	"__builtin__": "builtins",
	"copy_reg":    "copyreg",
}

// findClass resolves GLOBAL, STACK_GLOBAL and INST against the allow-list.
func (d *Decoder) findClass(module, name string) (*Class, error) {
	m := module
	if d.proto < 3 {
		if m3, ok := py2Modules[m]; ok {
			m = m3
		}
	}
	full := m + "." + name
	if c, ok := d.classes[full]; ok {
		return c, nil
	}
	c := &Class{Module: m, Name: name}
	if fn, ok := d.opts.Allow[full]; ok && fn != nil {
		c.new = fn
	} else if b, ok := builtinConstructors[full]; ok {
		c.builtin = b
	} else {
		ce := &ClassError{Module: module, Name: name}
		return nil, &Error{Offset: d.start, Op: d.opName(), Msg: ce.Error(), Err: ErrNotAllowed, Cause: ce}
	}
	if d.classes == nil {
		d.classes = map[string]*Class{}
	}
	d.classes[full] = c
	return c, nil
}

// call instantiates an allowed class.
func (d *Decoder) call(c *Class, args []any) (any, error) {
	if c.builtin != nil {
		v, err := c.builtin(d, args)
		if err != nil {
			if _, ok := err.(*Error); ok {
				return nil, err
			}
			return nil, d.fail(ErrType, "%s: %v", c, err)
		}
		return v, nil
	}
	fin, err := d.finishCopy(Tuple(args))
	if err != nil {
		return nil, err
	}
	v, err := c.new([]any(fin.(Tuple)))
	if err != nil {
		return nil, &Error{Offset: d.start, Op: d.opName(), Msg: fmt.Sprintf("%s: %s: %v", d.opName(), c, err), Err: ErrConstructor, Cause: err}
	}
	return v, nil
}

func (d *Decoder) build(obj, state any) error {
	switch o := obj.(type) {
	case *Object:
		st, err := d.finishCopy(state)
		if err != nil {
			return err
		}
		o.State = st
		return nil
	case SetStater:
		st, err := d.finishCopy(state)
		if err != nil {
			return err
		}
		if err := o.SetState(st); err != nil {
			return &Error{Offset: d.start, Op: d.opName(), Msg: fmt.Sprintf("%s: %T.SetState: %v", d.opName(), obj, err), Err: ErrConstructor, Cause: err}
		}
		return nil
	}
	if sd, ok := state.(*Dict); state == nil || ok && sd.Len() == 0 {
		return nil // no state to set: Python's BUILD does nothing either
	}
	return d.fail(ErrUnsupported, "cannot set the state of a %s", TypeName(obj))
}

func (d *Decoder) persistent(pid any) error {
	if d.opts.PersistentLoad == nil {
		return d.fail(ErrUnsupported, "the pickle has a persistent id (%s) and Options.PersistentLoad is nil", TypeName(pid))
	}
	p, err := d.finishCopy(pid)
	if err != nil {
		return err
	}
	v, err := d.opts.PersistentLoad(p)
	if err != nil {
		return &Error{Offset: d.start, Op: d.opName(), Msg: fmt.Sprintf("%s: PersistentLoad: %v", d.opName(), err), Err: ErrConstructor, Cause: err}
	}
	return d.push(v)
}
