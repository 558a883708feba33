package pickle

import (
	"bytes"
	"encoding/binary"
	"errors"
	"io"
	"math"
	"math/big"
	"slices"
	"strconv"
	"strings"
)

// run executes opcodes until STOP.
func (d *Decoder) run() (any, error) {
	for {
		d.start = d.pos
		d.op = 0
		op, err := d.r.ReadByte()
		if err != nil {
			if err != io.EOF {
				return nil, d.truncated(1, err)
			}
			return nil, &Error{Offset: d.pos, Msg: "data ends without a STOP opcode", Err: ErrTruncated}
		}
		d.pos++
		d.op = op
		if err := d.step(op); err != nil {
			if err == errStop {
				return d.stop()
			}
			return nil, err
		}
	}
}

var errStop = errors.New("stop")

func (d *Decoder) step(op byte) error {
	switch op {
	case opPROTO:
		b, err := d.readByte()
		if err != nil {
			return err
		}
		if b > HighestProtocol {
			return d.fail(ErrOpcode, "unsupported pickle protocol %d (this reader knows 0 to %d)", b, HighestProtocol)
		}
		d.proto = int(b)
		return nil
	case opFRAME:
		n, err := d.readU64()
		if err != nil {
			return err
		}
		if d.frameEnd > d.pos {
			return d.fail(ErrSyntax, "a new frame begins before the end of the current one (at offset %d)", d.frameEnd)
		}
		if n > math.MaxInt64-uint64(d.pos) {
			return d.fail(ErrSyntax, "frame length %d is impossible", n)
		}
		d.frameEnd = d.pos + int64(n)
		return nil
	case opSTOP:
		return errStop
	case opMARK:
		if err := d.charge(1); err != nil {
			return err
		}
		d.marks = append(d.marks, len(d.stack))
		return nil
	case opPOP:
		if n := len(d.marks); n > 0 && d.marks[n-1] == len(d.stack) {
			d.marks = d.marks[:n-1]
			return nil
		}
		_, err := d.pop()
		return err
	case opPOP_MARK:
		_, err := d.popMarkView()
		return err
	case opDUP:
		v, err := d.top()
		if err != nil {
			return err
		}
		d.dup = true // a value may now be held twice outside the memo
		return d.pushShared(v)

	// constants and numbers
	case opNONE:
		return d.push(nil)
	case opNEWTRUE:
		return d.push(true)
	case opNEWFALSE:
		return d.push(false)
	case opINT:
		line, err := d.readLine()
		if err != nil {
			return err
		}
		switch string(line) {
		case "00":
			return d.push(false)
		case "01":
			return d.push(true)
		}
		v, err := d.parseInt(line)
		if err != nil {
			return err
		}
		return d.push(v)
	case opLONG:
		line, err := d.readLine()
		if err != nil {
			return err
		}
		line = bytes.TrimSuffix(line, []byte("L"))
		v, err := d.parseInt(line)
		if err != nil {
			return err
		}
		return d.push(v)
	case opBININT:
		u, err := d.readU32()
		if err != nil {
			return err
		}
		return d.push(int64(int32(u)))
	case opBININT1:
		b, err := d.readByte()
		if err != nil {
			return err
		}
		return d.push(int64(b))
	case opBININT2:
		u, err := d.readU16()
		if err != nil {
			return err
		}
		return d.push(int64(u))
	case opLONG1:
		n, err := d.readByte()
		if err != nil {
			return err
		}
		b, err := d.readPayload(uint64(n))
		if err != nil {
			return err
		}
		return d.push(decodeLong(b))
	case opLONG4:
		u, err := d.readU32()
		if err != nil {
			return err
		}
		if int32(u) < 0 {
			return d.fail(ErrSyntax, "negative byte count %d", int32(u))
		}
		b, err := d.readPayload(uint64(u))
		if err != nil {
			return err
		}
		return d.push(decodeLong(b))
	case opFLOAT:
		line, err := d.readLine()
		if err != nil {
			return err
		}
		s := strings.TrimSpace(string(line))
		f, err := strconv.ParseFloat(s, 64)
		if err != nil && !errors.Is(err, strconv.ErrRange) {
			return d.fail(ErrSyntax, "%q is not a float", clip(s))
		}
		return d.push(f)
	case opBINFLOAT:
		var b [8]byte
		if err := d.readFixed(b[:]); err != nil {
			return err
		}
		return d.push(math.Float64frombits(binary.BigEndian.Uint64(b[:])))

	// strings and bytes
	case opSTRING:
		line, err := d.readLine()
		if err != nil {
			return err
		}
		if len(line) < 2 || line[0] != line[len(line)-1] || (line[0] != '\'' && line[0] != '"') {
			return d.fail(ErrSyntax, "the argument must be quoted")
		}
		s, err := escapeDecode(line[1 : len(line)-1])
		if err != nil {
			return d.fail(ErrSyntax, "%v", err)
		}
		return d.push(s)
	case opBINSTRING:
		u, err := d.readU32()
		if err != nil {
			return err
		}
		if int32(u) < 0 {
			return d.fail(ErrSyntax, "negative byte count %d", int32(u))
		}
		b, err := d.readPayload(uint64(u))
		if err != nil {
			return err
		}
		return d.push(string(b))
	case opSHORT_BINSTRING:
		n, err := d.readByte()
		if err != nil {
			return err
		}
		b, err := d.readPayload(uint64(n))
		if err != nil {
			return err
		}
		return d.push(string(b))
	case opUNICODE:
		line, err := d.readLine()
		if err != nil {
			return err
		}
		s, err := rawUnicodeEscapeDecode(line)
		if err != nil {
			return d.fail(ErrSyntax, "%v", err)
		}
		return d.push(s)
	case opSHORT_BINUNICODE:
		n, err := d.readByte()
		if err != nil {
			return err
		}
		return d.pushUnicode(uint64(n))
	case opBINUNICODE:
		n, err := d.readU32()
		if err != nil {
			return err
		}
		return d.pushUnicode(uint64(n))
	case opBINUNICODE8:
		n, err := d.readU64()
		if err != nil {
			return err
		}
		return d.pushUnicode(n)
	case opSHORT_BINBYTES:
		n, err := d.readByte()
		if err != nil {
			return err
		}
		return d.pushBytes(uint64(n))
	case opBINBYTES:
		n, err := d.readU32()
		if err != nil {
			return err
		}
		return d.pushBytes(uint64(n))
	case opBINBYTES8, opBYTEARRAY8:
		n, err := d.readU64()
		if err != nil {
			return err
		}
		return d.pushBytes(n)
	case opNEXT_BUFFER:
		if d.nextBuf >= len(d.opts.Buffers) {
			return d.fail(ErrUnsupported, "the pickle refers to out-of-band buffer %d, but Options.Buffers has %d", d.nextBuf, len(d.opts.Buffers))
		}
		b := d.opts.Buffers[d.nextBuf]
		d.nextBuf++
		return d.push(b)
	case opREADONLY_BUFFER:
		v, err := d.top()
		if err != nil {
			return err
		}
		if _, ok := v.([]byte); !ok {
			return d.fail(ErrType, "applies to a buffer, not a %s", TypeName(v))
		}
		return nil

	// containers
	case opEMPTY_TUPLE:
		return d.push(Tuple{})
	case opTUPLE:
		items, err := d.popMark()
		if err != nil {
			return err
		}
		return d.push(Tuple(items))
	case opTUPLE1, opTUPLE2, opTUPLE3:
		n := int(op-opTUPLE1) + 1
		if len(d.stack)-d.fence() < n {
			return d.underflow(n)
		}
		t := make(Tuple, n)
		copy(t, d.stack[len(d.stack)-n:])
		clear(d.stack[len(d.stack)-n:])
		d.stack = d.stack[:len(d.stack)-n]
		return d.push(t)
	case opEMPTY_LIST:
		return d.push(&list{})
	case opLIST:
		items, err := d.popMark()
		if err != nil {
			return err
		}
		return d.push(&list{items: items})
	case opAPPEND:
		if len(d.stack)-d.fence() < 2 {
			return d.underflow(2)
		}
		return d.appendTo(d.popView(1))
	case opAPPENDS:
		items, err := d.popMarkView()
		if err != nil {
			return err
		}
		return d.appendTo(items)
	case opEMPTY_DICT:
		if n := len(d.spares); n > 0 {
			m := d.spares[n-1]
			d.spares = d.spares[:n-1]
			return d.push(m)
		}
		return d.push(NewDict())
	case opDICT:
		items, err := d.popMarkView()
		if err != nil {
			return err
		}
		m := NewDict()
		if err := d.setItems(m, items); err != nil {
			return err
		}
		// setItems charged the items and index
		if err := d.spend(created(NewDict())); err != nil {
			return err
		}
		return d.pushShared(m)
	case opSETITEM:
		if len(d.stack)-d.fence() < 3 {
			return d.underflow(3)
		}
		return d.setItemsOn(d.popView(2))
	case opSETITEMS:
		items, err := d.popMarkView()
		if err != nil {
			return err
		}
		return d.setItemsOn(items)
	case opEMPTY_SET:
		return d.push(&Set{})
	case opADDITEMS:
		items, err := d.popMarkView()
		if err != nil {
			return err
		}
		v, err := d.top()
		if err != nil {
			return err
		}
		s, ok := v.(*Set)
		if !ok || s.Frozen {
			return d.fail(ErrType, "adds to a set, not a %s", TypeName(v))
		}
		return d.addItems(s, items)
	case opFROZENSET:
		items, err := d.popMarkView()
		if err != nil {
			return err
		}
		s := &Set{Frozen: true}
		if err := d.addItems(s, items); err != nil {
			return err
		}
		if err := d.spend(created(&Set{})); err != nil {
			return err
		}
		return d.pushShared(s)

	// memo
	case opGET:
		i, err := d.readIndex()
		if err != nil {
			return err
		}
		return d.memoGet(i)
	case opBINGET:
		b, err := d.readByte()
		if err != nil {
			return err
		}
		return d.memoGet(uint64(b))
	case opLONG_BINGET:
		u, err := d.readU32()
		if err != nil {
			return err
		}
		return d.memoGet(uint64(u))
	case opPUT:
		i, err := d.readIndex()
		if err != nil {
			return err
		}
		return d.memoPut(i)
	case opBINPUT:
		b, err := d.readByte()
		if err != nil {
			return err
		}
		return d.memoPut(uint64(b))
	case opLONG_BINPUT:
		u, err := d.readU32()
		if err != nil {
			return err
		}
		return d.memoPut(uint64(u))
	case opMEMOIZE:
		return d.memoPut(uint64(d.memoLen))

	// classes and objects
	case opGLOBAL:
		module, err := d.readName()
		if err != nil {
			return err
		}
		name, err := d.readName()
		if err != nil {
			return err
		}
		c, err := d.findClass(module, name)
		if err != nil {
			return err
		}
		return d.push(c)
	case opSTACK_GLOBAL:
		if len(d.stack)-d.fence() < 2 {
			return d.underflow(2)
		}
		n := len(d.stack)
		module, ok1 := d.stack[n-2].(string)
		name, ok2 := d.stack[n-1].(string)
		if !ok1 || !ok2 {
			return d.fail(ErrType, "module and name must be str, got %s and %s", TypeName(d.stack[n-2]), TypeName(d.stack[n-1]))
		}
		d.stack = d.stack[:n-2]
		c, err := d.findClass(module, name)
		if err != nil {
			return err
		}
		return d.push(c)
	case opINST:
		module, err := d.readName()
		if err != nil {
			return err
		}
		name, err := d.readName()
		if err != nil {
			return err
		}
		c, err := d.findClass(module, name)
		if err != nil {
			return err
		}
		args, err := d.popMark()
		if err != nil {
			return err
		}
		v, err := d.call(c, args)
		if err != nil {
			return err
		}
		return d.push(v)
	case opOBJ:
		items, err := d.popMark()
		if err != nil {
			return err
		}
		if len(items) == 0 {
			return d.fail(ErrStack, "needs a class above the mark, found nothing")
		}
		c, ok := items[0].(*Class)
		if !ok {
			return d.fail(ErrType, "cannot instantiate a %s", TypeName(items[0]))
		}
		v, err := d.call(c, items[1:])
		if err != nil {
			return err
		}
		return d.push(v)
	case opREDUCE:
		if len(d.stack)-d.fence() < 2 {
			return d.underflow(2)
		}
		n := len(d.stack)
		c, ok := d.stack[n-2].(*Class)
		if !ok {
			return d.fail(ErrType, "cannot call a %s", TypeName(d.stack[n-2]))
		}
		args, ok := d.stack[n-1].(Tuple)
		if !ok {
			return d.fail(ErrType, "the arguments of %s must be a tuple, got %s", c, TypeName(d.stack[n-1]))
		}
		v, err := d.call(c, args)
		if err != nil {
			return err
		}
		d.stack[n-1] = nil
		d.stack = d.stack[:n-1]
		d.stack[n-2] = v
		return nil
	case opNEWOBJ, opNEWOBJ_EX:
		want := 2
		if op == opNEWOBJ_EX {
			want = 3
		}
		if len(d.stack)-d.fence() < want {
			return d.underflow(want)
		}
		n := len(d.stack)
		c, ok := d.stack[n-want].(*Class)
		if !ok {
			return d.fail(ErrType, "cannot instantiate a %s", TypeName(d.stack[n-want]))
		}
		args, ok := d.stack[n-want+1].(Tuple)
		if !ok {
			return d.fail(ErrType, "the arguments of %s must be a tuple, got %s", c, TypeName(d.stack[n-want+1]))
		}
		if want == 3 {
			kw, ok := d.stack[n-1].(*Dict)
			if !ok {
				return d.fail(ErrType, "the keyword arguments of %s must be a dict, got %s", c, TypeName(d.stack[n-1]))
			}
			if kw.Len() > 0 {
				return d.fail(ErrUnsupported, "keyword arguments for %s are not supported", c)
			}
		}
		v, err := d.call(c, args)
		if err != nil {
			return err
		}
		clear(d.stack[n-want+1:])
		d.stack = d.stack[:n-want+1]
		d.stack[n-want] = v
		return nil
	case opBUILD:
		if len(d.stack)-d.fence() < 2 {
			return d.underflow(2)
		}
		n := len(d.stack)
		state := d.stack[n-1]
		if err := d.build(d.stack[n-2], state); err != nil {
			return err
		}
		d.stack[n-1] = nil
		d.stack = d.stack[:n-1]
		return nil
	case opPERSID:
		line, err := d.readLine()
		if err != nil {
			return err
		}
		for _, c := range line {
			if c >= 0x80 {
				return d.fail(ErrSyntax, "persistent ids in protocol 0 must be ASCII")
			}
		}
		return d.persistent(string(line))
	case opBINPERSID:
		pid, err := d.pop()
		if err != nil {
			return err
		}
		return d.persistent(pid)
	case opEXT1, opEXT2, opEXT4:
		var code int64
		switch op {
		case opEXT1:
			b, err := d.readByte()
			if err != nil {
				return err
			}
			code = int64(b)
		case opEXT2:
			u, err := d.readU16()
			if err != nil {
				return err
			}
			code = int64(u)
		default:
			u, err := d.readU32()
			if err != nil {
				return err
			}
			code = int64(int32(u))
		}
		return d.fail(ErrUnsupported, "extension code %d (copyreg's registry) is not supported", code)
	}
	return d.fail(ErrOpcode, "unknown opcode")
}

func (d *Decoder) stop() (any, error) {
	v, err := d.pop()
	if err != nil {
		return nil, err
	}
	f := finisher{d: d, state: map[any]int{}}
	return f.finish(v)
}

func (d *Decoder) pushUnicode(n uint64) error {
	b, err := d.readPayload(n)
	if err != nil {
		return err
	}
	if i := invalidUTF8(b); i >= 0 {
		return d.fail(ErrSyntax, "the string is not valid UTF-8 (byte %d of %d)", i, len(b))
	}
	return d.push(d.intern(b))
}

// intern returns b as a string, the same string for equal short ones.
func (d *Decoder) intern(b []byte) string {
	if len(b) > maxInterned {
		return string(b)
	}
	if s, ok := d.strs[string(b)]; ok {
		return s
	}
	s := string(b)
	if d.strs == nil {
		d.strs = map[string]string{}
	}
	if len(d.strs) < maxStrs {
		d.strs[s] = s
	}
	return s
}

func (d *Decoder) pushBytes(n uint64) error {
	b, err := d.readPayload(n)
	if err != nil {
		return err
	}
	if n <= maxInterned {
		b = bytes.Clone(b) // it is the Decoder's buffer
	}
	return d.push(b)
}

// readIndex reads the decimal memo index of GET and PUT.
func (d *Decoder) readIndex() (uint64, error) {
	line, err := d.readLine()
	if err != nil {
		return 0, err
	}
	s := strings.TrimSpace(string(line))
	i, err := strconv.ParseUint(s, 10, 64)
	if err != nil {
		if strings.HasPrefix(s, "-") {
			return 0, d.fail(ErrSyntax, "negative memo index %q", clip(s))
		}
		return 0, d.fail(ErrSyntax, "memo index %q is not a number", clip(s))
	}
	return i, nil
}

// readName reads a module or class name line of GLOBAL or INST.
func (d *Decoder) readName() (string, error) {
	line, err := d.readLine()
	if err != nil {
		return "", err
	}
	if invalidUTF8(line) >= 0 {
		return "", d.fail(ErrSyntax, "name %q is not UTF-8", clip(string(line)))
	}
	return string(line), nil
}

// parseInt parses the decimal argument of INT and LONG.
func (d *Decoder) parseInt(line []byte) (any, error) {
	s := strings.TrimSpace(string(line))
	digits := strings.TrimLeft(s, "+-")
	if len(digits) > maxTextIntDigits {
		return nil, d.fail(ErrLimit, "integer of %d digits exceeds the limit of %d", len(digits), maxTextIntDigits)
	}
	if len(digits) == 0 || len(s)-len(digits) > 1 || strings.Trim(digits, "0123456789") != "" {
		return nil, d.fail(ErrSyntax, "%q is not an integer", clip(s))
	}
	if i, err := strconv.ParseInt(s, 10, 64); err == nil {
		return i, nil
	}
	b, ok := new(big.Int).SetString(s, 10)
	if !ok {
		return nil, d.fail(ErrSyntax, "%q is not an integer", clip(s))
	}
	return b, nil
}

// decodeLong decodes the little-endian two's complement of LONG1 and LONG4.
func decodeLong(b []byte) any {
	n := len(b)
	if n == 0 {
		return int64(0)
	}
	if n <= 8 {
		var u uint64
		for i := n - 1; i >= 0; i-- {
			u = u<<8 | uint64(b[i])
		}
		shift := uint(64 - 8*n)
		return int64(u<<shift) >> shift
	}
	be := make([]byte, n)
	for i, c := range b {
		be[n-1-i] = c
	}
	x := new(big.Int).SetBytes(be)
	if b[n-1]&0x80 != 0 {
		x.Sub(x, new(big.Int).Lsh(big.NewInt(1), uint(8*n)))
	}
	return normInt(x)
}

// normInt returns x as int64 when it fits.
func normInt(x *big.Int) any {
	if x.IsInt64() {
		return x.Int64()
	}
	return x
}

// appendTo appends items to the list on top of the stack.
func (d *Decoder) appendTo(items []any) error {
	v, err := d.top()
	if err != nil {
		return err
	}
	l, ok := v.(*list)
	if !ok {
		return d.fail(ErrType, "appends to a list, not a %s", TypeName(v))
	}
	if len(l.items)+len(items) > cap(l.items) {
		// Double, rather than append's 1.25 for large slices: a long
		// list built in batches then allocates twice its size in all,
		// not five times.
		grow := max(len(items), len(l.items))
		// the old array stays allocated until collected: charge the new
		// one whole
		if err := d.spend(slotSize * int64(len(l.items)+grow)); err != nil {
			return err
		}
		l.items = slices.Grow(l.items, grow)
	}
	if d.opts.Replace == nil {
		l.items = append(l.items, items...)
		return nil
	}
	for _, it := range items {
		if m, ok := it.(*Dict); ok && d.offered(m) {
			// its containers, taken before finishing turns lists into
			// []any, to free their memo slots if it is replaced (with
			// Refs, what is read back stays and the rest was not kept)
			var kids []any
			if d.opts.Refs == nil {
				for _, kv := range m.items {
					switch kv.Value.(type) {
					case *list, *Dict:
						kids = append(kids, kv.Value)
					}
				}
			}
			// finished without charging: each value is walked once here
			if !d.finishFlat(m) {
				f := finisher{d: d, state: map[any]int{}}
				if _, err := f.finish(m); err != nil {
					return err
				}
			}
			if r, ok := d.opts.Replace(m); ok {
				if d.opts.Refs == nil {
					d.release(m, false)
					for _, k := range kids {
						d.release(k, true)
					}
				} else if m.memoAt == 0 && !d.dup && m.index == nil {
					// nothing else holds it (not in the memo, never
					// duplicated): the next dict reuses it and its items
					clear(m.items)
					m.items = m.items[:0]
					if len(d.spares) < maxSpares {
						d.spares = append(d.spares, m)
					}
				}
				it = r
			}
		}
		l.items = append(l.items, it)
	}
	return nil
}

// offered reports whether m holds a key Options.Replace is offered.
func (d *Decoder) offered(m *Dict) bool {
	if m.hasStr(d.opts.ReplaceKey) {
		return true
	}
	for _, k := range d.opts.ReplaceKeys {
		if m.hasStr(k) {
			return true
		}
	}
	return false
}

// finishFlat finishes, without the finisher's map, a dict of the shape of
// a snapshot's entries: str keys, and values that are scalars or lists
// (or tuples) of scalars and of dicts of str keys and scalar values. Such
// a dict cannot contain itself and is 3 deep at most. It reports false,
// having changed nothing, for any other dict.
func (d *Decoder) finishFlat(m *Dict) bool {
	if d.opts.MaxDepth < 4 {
		return false
	}
	flat := func(m *Dict) bool {
		for i := range m.items {
			if _, ok := m.items[i].Key.(string); !ok || !scalar(m.items[i].Value) {
				return false
			}
		}
		return true
	}
	seq := func(items []any) bool {
		for _, e := range items {
			if x, ok := e.(*Dict); ok {
				if !flat(x) {
					return false
				}
			} else if !scalar(e) {
				return false
			}
		}
		return true
	}
	for i := range m.items {
		if _, ok := m.items[i].Key.(string); !ok {
			return false
		}
		switch x := m.items[i].Value.(type) {
		case *list:
			if !seq(x.items) {
				return false
			}
		case Tuple:
			if !seq(x) {
				return false
			}
		default:
			if !scalar(x) {
				return false
			}
		}
	}
	for i := range m.items {
		if x, ok := m.items[i].Value.(*list); ok {
			m.items[i].Value = finishedList(x)
		}
	}
	return true
}

// scalar reports whether v holds no other value.
func scalar(v any) bool {
	switch v.(type) {
	case nil, bool, int64, float64, string, []byte, *big.Int:
		return true
	}
	return false
}

// setItemsOn stores key/value pairs in the dict on top of the stack.
func (d *Decoder) setItemsOn(kv []any) error {
	v, err := d.top()
	if err != nil {
		return err
	}
	m, ok := v.(*Dict)
	if !ok {
		return d.fail(ErrType, "sets items of a dict, not a %s", TypeName(v))
	}
	return d.setItems(m, kv)
}

func (d *Decoder) setItems(m *Dict, kv []any) error {
	if len(kv)%2 != 0 {
		return d.fail(ErrStack, "odd number of items (%d) for key/value pairs", len(kv))
	}
	if m.items == nil {
		if err := d.spend(itemSize * int64(len(kv)/2)); err != nil {
			return err
		}
		m.items = make([]Item, 0, len(kv)/2)
	} else if len(m.items)+len(kv)/2 > cap(m.items) {
		// Double, as appendTo does.
		grow := max(len(kv)/2, len(m.items))
		if err := d.spend(itemSize * int64(len(m.items)+grow)); err != nil {
			return err
		}
		m.items = slices.Grow(m.items, grow)
	}
	// The index (past smallDict items) costs an entry per item, and is
	// charged before it grows.
	if n := len(m.items) + len(kv)/2; n > smallDict {
		if err := d.spend(indexSize * int64(n-len(m.index))); err != nil {
			return err
		}
	}
	for i := 0; i < len(kv); i += 2 {
		if s, ok := kv[i].(string); ok {
			// a str key is its own hash; storing it costs its length
			if d.bytes -= int64(len(s)); d.bytes < 0 {
				return d.fail(ErrLimit, "hashing keys exceeds the remaining budget (Options.MaxBytes)")
			}
			m.set(kv[i], kv[i+1], nil)
			continue
		}
		h, err := d.hash(kv[i])
		if err != nil {
			return err
		}
		m.set(kv[i], kv[i+1], h)
	}
	return nil
}

func (d *Decoder) addItems(s *Set, items []any) error {
	if err := d.spend((2*slotSize + indexSize) * int64(len(items))); err != nil {
		return err
	}
	for _, v := range items {
		h, err := d.hash(v)
		if err != nil {
			return err
		}
		s.add(v, h)
	}
	return nil
}

// hash computes a key's hash, turning failures into *Errors. Hashing is
// charged to the bytes budget (a str key costs its length each time), so
// that keys cannot make decoding slow without limit.
func (d *Decoder) hash(v any) (any, error) {
	h, err := d.keys.hash(v)
	switch {
	case err == nil:
		return h, nil
	case errors.Is(err, errUnhashable):
		return nil, d.fail(ErrType, "%v (a key or set item must be hashable)", err)
	case err == errKeyBudget:
		return nil, d.fail(ErrLimit, "hashing keys exceeds the remaining budget (Options.MaxBytes)")
	default:
		return nil, d.fail(ErrLimit, "key nested deeper than %d (Options.MaxDepth)", d.opts.MaxDepth)
	}
}
