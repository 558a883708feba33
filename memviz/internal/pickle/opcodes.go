package pickle

// Opcodes of pickle protocols 0 to 5, as in CPython's Lib/pickle.py (where
// pickletools.py documents each one).
const (
	opMARK            = '('
	opSTOP            = '.'
	opPOP             = '0'
	opPOP_MARK        = '1'
	opDUP             = '2'
	opFLOAT           = 'F'
	opINT             = 'I'
	opBININT          = 'J'
	opBININT1         = 'K'
	opLONG            = 'L'
	opBININT2         = 'M'
	opNONE            = 'N'
	opPERSID          = 'P'
	opBINPERSID       = 'Q'
	opREDUCE          = 'R'
	opSTRING          = 'S'
	opBINSTRING       = 'T'
	opSHORT_BINSTRING = 'U'
	opUNICODE         = 'V'
	opBINUNICODE      = 'X'
	opAPPEND          = 'a'
	opBUILD           = 'b'
	opGLOBAL          = 'c'
	opDICT            = 'd'
	opEMPTY_DICT      = '}'
	opAPPENDS         = 'e'
	opGET             = 'g'
	opBINGET          = 'h'
	opINST            = 'i'
	opLONG_BINGET     = 'j'
	opLIST            = 'l'
	opEMPTY_LIST      = ']'
	opOBJ             = 'o'
	opPUT             = 'p'
	opBINPUT          = 'q'
	opLONG_BINPUT     = 'r'
	opSETITEM         = 's'
	opTUPLE           = 't'
	opEMPTY_TUPLE     = ')'
	opSETITEMS        = 'u'
	opBINFLOAT        = 'G'

	// protocol 2
	opPROTO    = 0x80
	opNEWOBJ   = 0x81
	opEXT1     = 0x82
	opEXT2     = 0x83
	opEXT4     = 0x84
	opTUPLE1   = 0x85
	opTUPLE2   = 0x86
	opTUPLE3   = 0x87
	opNEWTRUE  = 0x88
	opNEWFALSE = 0x89
	opLONG1    = 0x8a
	opLONG4    = 0x8b

	// protocol 3
	opBINBYTES       = 'B'
	opSHORT_BINBYTES = 'C'

	// protocol 4
	opSHORT_BINUNICODE = 0x8c
	opBINUNICODE8      = 0x8d
	opBINBYTES8        = 0x8e
	opEMPTY_SET        = 0x8f
	opADDITEMS         = 0x90
	opFROZENSET        = 0x91
	opNEWOBJ_EX        = 0x92
	opSTACK_GLOBAL     = 0x93
	opMEMOIZE          = 0x94
	opFRAME            = 0x95

	// protocol 5
	opBYTEARRAY8      = 0x96
	opNEXT_BUFFER     = 0x97
	opREADONLY_BUFFER = 0x98
)

// HighestProtocol is the newest pickle protocol this package reads.
const HighestProtocol = 5

// argKind says how an opcode's argument is laid out in the stream.
type argKind uint8

const (
	argNone  argKind = iota
	argU1            // 1 byte
	argU2            // 2 bytes, little endian
	argU4            // 4 bytes, little endian
	argU8            // 8 bytes (FRAME length, BINFLOAT)
	argLine          // text up to and including '\n'
	argLine2         // two lines (GLOBAL, INST)
	argLen1          // 1-byte length, then that many bytes
	argLen4          // 4-byte length, then that many bytes
	argLen8          // 8-byte length, then that many bytes
)

type opInfo struct {
	name string
	arg  argKind
}

// opTable describes every opcode; the zero entry (empty name) is an
// unknown byte.
var opTable = [256]opInfo{
	opMARK:             {"MARK", argNone},
	opSTOP:             {"STOP", argNone},
	opPOP:              {"POP", argNone},
	opPOP_MARK:         {"POP_MARK", argNone},
	opDUP:              {"DUP", argNone},
	opFLOAT:            {"FLOAT", argLine},
	opINT:              {"INT", argLine},
	opBININT:           {"BININT", argU4},
	opBININT1:          {"BININT1", argU1},
	opLONG:             {"LONG", argLine},
	opBININT2:          {"BININT2", argU2},
	opNONE:             {"NONE", argNone},
	opPERSID:           {"PERSID", argLine},
	opBINPERSID:        {"BINPERSID", argNone},
	opREDUCE:           {"REDUCE", argNone},
	opSTRING:           {"STRING", argLine},
	opBINSTRING:        {"BINSTRING", argLen4},
	opSHORT_BINSTRING:  {"SHORT_BINSTRING", argLen1},
	opUNICODE:          {"UNICODE", argLine},
	opBINUNICODE:       {"BINUNICODE", argLen4},
	opAPPEND:           {"APPEND", argNone},
	opBUILD:            {"BUILD", argNone},
	opGLOBAL:           {"GLOBAL", argLine2},
	opDICT:             {"DICT", argNone},
	opEMPTY_DICT:       {"EMPTY_DICT", argNone},
	opAPPENDS:          {"APPENDS", argNone},
	opGET:              {"GET", argLine},
	opBINGET:           {"BINGET", argU1},
	opINST:             {"INST", argLine2},
	opLONG_BINGET:      {"LONG_BINGET", argU4},
	opLIST:             {"LIST", argNone},
	opEMPTY_LIST:       {"EMPTY_LIST", argNone},
	opOBJ:              {"OBJ", argNone},
	opPUT:              {"PUT", argLine},
	opBINPUT:           {"BINPUT", argU1},
	opLONG_BINPUT:      {"LONG_BINPUT", argU4},
	opSETITEM:          {"SETITEM", argNone},
	opTUPLE:            {"TUPLE", argNone},
	opEMPTY_TUPLE:      {"EMPTY_TUPLE", argNone},
	opSETITEMS:         {"SETITEMS", argNone},
	opBINFLOAT:         {"BINFLOAT", argU8},
	opPROTO:            {"PROTO", argU1},
	opNEWOBJ:           {"NEWOBJ", argNone},
	opEXT1:             {"EXT1", argU1},
	opEXT2:             {"EXT2", argU2},
	opEXT4:             {"EXT4", argU4},
	opTUPLE1:           {"TUPLE1", argNone},
	opTUPLE2:           {"TUPLE2", argNone},
	opTUPLE3:           {"TUPLE3", argNone},
	opNEWTRUE:          {"NEWTRUE", argNone},
	opNEWFALSE:         {"NEWFALSE", argNone},
	opLONG1:            {"LONG1", argLen1},
	opLONG4:            {"LONG4", argLen4},
	opBINBYTES:         {"BINBYTES", argLen4},
	opSHORT_BINBYTES:   {"SHORT_BINBYTES", argLen1},
	opSHORT_BINUNICODE: {"SHORT_BINUNICODE", argLen1},
	opBINUNICODE8:      {"BINUNICODE8", argLen8},
	opBINBYTES8:        {"BINBYTES8", argLen8},
	opEMPTY_SET:        {"EMPTY_SET", argNone},
	opADDITEMS:         {"ADDITEMS", argNone},
	opFROZENSET:        {"FROZENSET", argNone},
	opNEWOBJ_EX:        {"NEWOBJ_EX", argNone},
	opSTACK_GLOBAL:     {"STACK_GLOBAL", argNone},
	opMEMOIZE:          {"MEMOIZE", argNone},
	opFRAME:            {"FRAME", argU8},
	opBYTEARRAY8:       {"BYTEARRAY8", argLen8},
	opNEXT_BUFFER:      {"NEXT_BUFFER", argNone},
	opREADONLY_BUFFER:  {"READONLY_BUFFER", argNone},
}
