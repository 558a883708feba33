package gemm

import (
	"bytes"
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"unsafe"

	"github.com/headroom-ml/headroom/internal/cpuid"
	"github.com/headroom-ml/headroom/internal/parallel"
)

// The checked-in amx_amd64.s is gen_amx.go's output.
func TestAMXAsmIsGenerated(t *testing.T) {
	gobin, err := exec.LookPath("go")
	if err != nil {
		t.Skip("no go command to run the generator")
	}
	out := filepath.Join(t.TempDir(), "amx_amd64.s")
	if msg, err := exec.Command(gobin, "run", "gen_amx.go", "-o", out).CombinedOutput(); err != nil {
		t.Fatalf("go run gen_amx.go: %v\n%s", err, msg)
	}
	want, err := os.ReadFile(out)
	if err != nil {
		t.Fatal(err)
	}
	got, err := os.ReadFile("amx_amd64.s")
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, want) {
		line := 1 + bytes.Count(got[:commonPrefix(got, want)], []byte("\n"))
		t.Fatalf("amx_amd64.s differs from gen_amx.go's output from line %d: run go generate ./cpu/internal/gemm/", line)
	}
}

// Every instruction the generator encoded, disassembled by GNU objdump
// (which knows AMX from binutils 2.36), is what its comment says: the
// encodings are checked by a disassembler written independently of the
// generator, on any machine with binutils. The expected mnemonics are
// also pinned here, so that a generator writing wrong bytes and a
// matching wrong comment still fails.
func TestAMXEncoding(t *testing.T) {
	src, err := os.ReadFile("amx_amd64.s")
	if err != nil {
		t.Fatal(err)
	}
	line := regexp.MustCompile(`^\s*((?:BYTE \$0x[0-9a-f]{2};? ?)+)\s*// (.*)$`)
	byteRe := regexp.MustCompile(`0x([0-9a-f]{2})`)
	var code []byte
	var comments []string
	for _, l := range strings.Split(string(src), "\n") {
		m := line.FindStringSubmatch(l)
		if m == nil {
			if strings.Contains(l, "BYTE") {
				t.Fatalf("unparsed BYTE line %q", l)
			}
			continue
		}
		for _, b := range byteRe.FindAllStringSubmatch(m[1], -1) {
			v, _ := strconv.ParseUint(b[1], 16, 8)
			code = append(code, byte(v))
		}
		comments = append(comments, strings.TrimSpace(m[2]))
	}
	// The kernel's instructions, once each (the step appears twice).
	want := []string{
		"ldtilecfg [rax]", "tilezero tmm0", "tilezero tmm3",
		"tileloadd tmm4,[rsi+r8*1]", "tileloadd tmm5,[r10+r8*1]", "tileloadd tmm6,[rdi+r9*1]", "tileloadd tmm7,[rdi+r9*1+0x40]",
		"tdpbf16ps tmm0,tmm4,tmm6", "tdpbf16ps tmm1,tmm4,tmm7", "tdpbf16ps tmm2,tmm5,tmm6", "tdpbf16ps tmm3,tmm5,tmm7",
		"tilestored [rax+r9*1],tmm0", "tilestored [rax+r9*1+0x840],tmm3", "tilerelease",
	}
	for _, w := range want {
		found := false
		for _, c := range comments {
			found = found || c == w
		}
		if !found {
			t.Errorf("no instruction %q in amx_amd64.s", w)
		}
	}
	objdump, err := exec.LookPath("objdump")
	if err != nil {
		t.Skip("GNU objdump (binutils) not installed: the encodings are not disassembled")
	}
	bin := filepath.Join(t.TempDir(), "amx.bin")
	if err := os.WriteFile(bin, code, 0o644); err != nil {
		t.Fatal(err)
	}
	out, err := exec.Command(objdump, "-D", "-b", "binary", "-m", "i386:x86-64", "-M", "intel", bin).CombinedOutput()
	if err != nil {
		t.Skipf("objdump cannot disassemble raw x86-64: %v\n%s", err, out)
	}
	// "  19:	c4 a2 7b 4b 24 06    	tileloadd tmm4,[rsi+r8*1]"; long
	// encodings continue on a line of bytes alone.
	insn := regexp.MustCompile(`^\s*[0-9a-f]+:\t[0-9a-f ]+\t(.*)$`)
	var got []string
	for _, l := range strings.Split(string(out), "\n") {
		if m := insn.FindStringSubmatch(l); m != nil {
			got = append(got, strings.Join(strings.Fields(m[1]), " "))
		}
	}
	if len(got) != len(comments) {
		t.Fatalf("objdump decoded %d instructions from the %d encoded:\n%s", len(got), len(comments), out)
	}
	for i := range got {
		if got[i] != comments[i] {
			t.Errorf("instruction %d: objdump reads %q, the generator wrote %q", i, got[i], comments[i])
		}
	}
}

// The models' rules, each on a case that tells it from an alternative:
// the SDM's per-lane temporaries against the Intrinsics Guide's running
// sum (and VDPBF16PS's, odd first), a zero pair's +0 added to a -0
// temporary, denormal inputs as zeros.
func TestAMXStepDotCases(t *testing.T) {
	one, big := pairOf(1, 1), pairOf(4096, 1)
	for _, c := range []struct {
		name        string
		acc         float32
		a, b        []uint32
		lanes, pair float32
	}{
		// even: 2^24 then -2^24; odd: 1 then 0. Lanes: 0 + 1 = 1. A
		// running sum rounds 2^24+1 to 2^24 (ties to even), then 0.
		{"lanes", 0, []uint32{big, pairOf(-4096, 0)}, []uint32{pairOf(4096, 1), pairOf(4096, 0)}, 1, 0},
		// Products -0·1 in both halves: each temporary is +0 + -0 =
		// +0 and the padding's zero pairs add +0; the element stays +0
		// in either model.
		{"negative zero padded", 0, []uint32{pairOf(float32(math.Copysign(0, -1)), float32(math.Copysign(0, -1)))}, []uint32{one}, 0, 0},
		// A denormal bf16 (0x0001) counts as zero: 1e38·denormal would
		// otherwise be about 1e-3.
		{"DAZ", 2, []uint32{pairOf(0x1p100, 0) | 0}, []uint32{0x0001}, 2, 2},
		{"accumulate", 1.5, []uint32{one, one}, []uint32{one, one}, 5.5, 5.5},
	} {
		if got := amxStepDot(amxLanes, c.acc, c.a, c.b); !sameBits(got, c.lanes) {
			t.Errorf("%s: lanes model %g, want %g", c.name, got, c.lanes)
		}
		if got := amxStepDot(amxPairs, c.acc, c.a, c.b); !sameBits(got, c.pair) {
			t.Errorf("%s: pairs model %g, want %g", c.name, got, c.pair)
		}
	}
	// The padding's one effect: a sum of -0 products ends +0 (a
	// VDPBF16PS sum of the same pair from +0 is +0 too: +0 + -0).
	negZero := float32(math.Copysign(0, -1))
	if got := amxStepDot(amxLanes, negZero, nil, nil); !sameBits(got, 0) {
		t.Errorf("-0 plus a padded step: %g (%#x), want +0", got, math.Float32bits(got))
	}
}

// refGemmAMX is the AMX product by RefDotAMX, element by element.
func refGemmAMX(transA, transB bool, m, n, k int, alpha float32, a []uint16, lda int, b []uint16, ldb int, beta float32, c []float32, ldc int) {
	ai, bj := make([]uint16, k), make([]uint16, k)
	for i := range m {
		for p := range k {
			if transA {
				ai[p] = a[p*lda+i]
			} else {
				ai[p] = a[i*lda+p]
			}
		}
		for j := range n {
			for p := range k {
				if transB {
					bj[p] = b[j*ldb+p]
				} else {
					bj[p] = b[p*ldb+j]
				}
			}
			c[i*ldc+j] = RefDotAMX(ai, bj, alpha, beta, c[i*ldc+j])
		}
	}
}

// amxCases cross the AMX kernel's steps (k%32 != 0, k < 32), its 32×32
// tile (edges), the driver's K blocks (k > 512: 1100 in blocks of 368,
// 184 pairs = 11 steps and 8), its A forms (strided in place: even lda;
// rows copied: odd lda; a transposed A packed into rows), transposed B,
// and the stores (beta 0, 1, other).
var amxCases = []gemmCase{
	{m: 32, n: 32, k: 32, alpha: 1},
	{m: 32, n: 32, k: 20, alpha: 1, beta: 1},
	{m: 3, n: 5, k: 7, alpha: 1},
	{m: 1, n: 70, k: 33, padA: 1, alpha: -0.5, beta: -0.75},
	{m: 33, n: 31, k: 45, padA: 1, padB: 3, padC: 2, alpha: 1.5, beta: 1},
	{m: 70, n: 65, k: 100, transA: true, padA: 2, alpha: 1, beta: -0.75},
	{m: 40, n: 50, k: 77, transB: true, padB: 1, alpha: -0.5},
	{m: 50, n: 40, k: 62, transA: true, transB: true, padC: 3, alpha: 1, beta: 1},
	{m: 100, n: 36, k: 600, alpha: 1, beta: -0.75},
	{m: 64, n: 40, k: 1100, padA: 2, alpha: 1, beta: 1},
	{m: 45, n: 70, k: 1101, transA: true, transB: true, padA: 1, alpha: 0.5, beta: -0.75},
}

// SgemmMixed on the AMX contract in Go (amxGoKernel) is bitwise RefDotAMX,
// element by element, on 1 and 2 threads: the driver's use of the AMX
// kernel (blocks, tails, edges, strides, transposes, stores, splits)
// tested on every machine; the assembly is held to the Go contract on
// AMX hardware (TestAMXAsm).
func TestSgemmAMXContract(t *testing.T) {
	for ci, tc := range amxCases {
		if testing.Short() && tc.m*tc.n*tc.k > 3e6 {
			continue
		}
		rng := rand.New(rand.NewPCG(uint64(ci), 21))
		mt := makeMats(tc, rng)
		a := randBF16s(rng, len(mt.a), ci%3 == 0)
		b := randBF16s(rng, len(mt.b), ci%3 == 0)
		c0 := to32(mt.c)
		want := append([]float32(nil), c0...)
		refGemmAMX(tc.transA, tc.transB, tc.m, tc.n, tc.k, float32(tc.alpha), a, mt.lda, b, mt.ldb, float32(tc.beta), want, mt.ldc)
		for _, threads := range []int{1, 2} {
			got := append([]float32(nil), c0...)
			func() {
				defer useBF16Kern(amxGoKernel(amxLanes))()
				SgemmMixed(tc.transA, tc.transB, tc.m, tc.n, tc.k, float32(tc.alpha), BF16(a), mt.lda, BF16(b), mt.ldb, float32(tc.beta), got, mt.ldc, parallel.NewPool(threads))
			}()
			for i := range want {
				if !sameBits(got[i], want[i]) {
					t.Fatalf("t%d %v: element %d (row %d col %d) = %g (%#08x), want %g (%#08x)", threads, tc, i, i/mt.ldc, i%mt.ldc, got[i], math.Float32bits(got[i]), want[i], math.Float32bits(want[i]))
				}
			}
		}
	}
}

// The self-check accepts the contract (bitwise, naming the model it
// matched) and rejects kernels wrong as a mis-encoded one would be: B's
// tiles swapped, a tail's pairs dropped, two rows of A swapped.
func TestAMXSelfCheck(t *testing.T) {
	goKern := func(model amxModel) bf16StridedFn {
		return func(kp int, a []uint32, rs int, b []uint32, c []float32, ldc int, alpha, beta float32, beta0 bool) {
			amxTileGo(model, kp, a, rs, b, c, ldc, alpha, beta, beta0)
		}
	}
	lanes := goKern(amxLanes)
	for _, c := range []struct {
		name  string
		s     bf16StridedFn
		ok    bool
		model amxModel
		says  string
	}{
		{"contract", lanes, true, amxLanes, "bitwise the SDM"},
		{"intrinsics guide", goKern(amxPairs), true, amxPairs, "bitwise the Intrinsics Guide"},
		{"swapped B tiles", func(kp int, a []uint32, rs int, b []uint32, c []float32, ldc int, alpha, beta float32, beta0 bool) {
			sw := append([]uint32(nil), b...)
			for q := range kp {
				copy(sw[q*32:q*32+16], b[q*32+16:q*32+32])
				copy(sw[q*32+16:q*32+32], b[q*32:q*32+16])
			}
			lanes(kp, a, rs, sw, c, ldc, alpha, beta, beta0)
		}, false, 0, "worst error"},
		{"tail dropped", func(kp int, a []uint32, rs int, b []uint32, c []float32, ldc int, alpha, beta float32, beta0 bool) {
			if kp >= 16 && kp%16 != 0 {
				kp -= kp % 16
			}
			lanes(kp, a, rs, b, c, ldc, alpha, beta, beta0)
		}, false, 0, "worst error"},
		{"rows swapped", func(kp int, a []uint32, rs int, b []uint32, c []float32, ldc int, alpha, beta float32, beta0 bool) {
			sw := append([]uint32(nil), a...)
			copy(sw[:kp], a[rs:rs+kp])
			copy(sw[rs:rs+kp], a[:kp])
			lanes(kp, sw, rs, b, c, ldc, alpha, beta, beta0)
		}, false, 0, "worst error"},
		{"not bitwise, close", func(kp int, a []uint32, rs int, b []uint32, c []float32, ldc int, alpha, beta float32, beta0 bool) {
			lanes(kp, a, rs, b, c, ldc, alpha, beta, beta0)
			c[0] = math.Nextafter32(c[0], float32(math.Inf(1)))
		}, true, amxLanes, "not bitwise"},
	} {
		model, report, ok := amxSelfCheck(c.s)
		if ok != c.ok || ok && model != c.model || !strings.Contains(report, c.says) {
			t.Errorf("%s: self-check ok %v model %v %q, want ok %v model %v and %q", c.name, ok, model, report, c.ok, c.model, c.says)
		}
	}
}

// Where the AMX kernel does not run, the status says why, in words that
// match the machine; where it runs, it is the first kernel, and the
// reports name it.
func TestAMXStatus(t *testing.T) {
	on, why := AMXStatus()
	t.Logf("AMX on %v: %s", on, why)
	if why == "" {
		t.Fatal("no reason given")
	}
	caps := Caps()
	if caps.AMXReason != why {
		t.Errorf("Caps().AMXReason %q, AMXStatus %q", caps.AMXReason, why)
	}
	d, x := cpuid.Detected, cpuid.X86
	switch {
	case on:
		if ks := bf16Kernels(); len(ks) == 0 || !ks[0].amx || !strings.Contains(why, "self-check") {
			t.Errorf("AMX on (%q) but not the first bf16 kernel", why)
		}
	case !(d.AMXTile && d.AMXBF16):
		if !strings.Contains(why, "no AMX") && !strings.Contains(why, "assembly") {
			t.Errorf("CPU without AMX: reason %q", why)
		}
	case !(x.AMXTile && x.AMXBF16):
		if !strings.Contains(why, "HEADROOM_MAX_ISA") {
			t.Errorf("AMX limited away: reason %q", why)
		}
	default:
		if !strings.Contains(why, "AMX off") {
			t.Errorf("AMX present, not on: reason %q", why)
		}
	}
	for _, k := range bf16Kernels() {
		if k.amx && !on {
			t.Errorf("kernel %s listed with AMX off", k.name)
		}
	}
}

// With an AMX kernel in use the reports say so, Caps sets AMX, and the
// convolutions' tile stays a VDPBF16PS one.
func TestAMXReported(t *testing.T) {
	defer useBF16Kern(amxGoKernel(amxLanes))()
	if s := KernelSummary(); !strings.Contains(s, "AMX-BF16 TDPBF16PS (32x32 tile") {
		t.Errorf("KernelSummary() = %q", s)
	}
	if c := Caps(); !c.AMX || !c.NativeBF16 {
		t.Errorf("Caps() = %+v, want AMX and NativeBF16", c)
	}
	if tile, ok := NativeBF16Tile(); ok && tile.kern.amx {
		t.Errorf("NativeBF16Tile is the AMX kernel %s", tile.kern.name)
	}
}

// amxEmu is amxKernel32x32 in Go, instruction for instruction as
// gen_amx.go writes it: the configuration LDTILECFG reads, TILELOADD's
// addresses (base + row × stride), the steps' advances, the tail's
// scratch offsets, TILESTORED's layout of the sums and the AVX-512
// store, with TDPBF16PS by the lanes model. It lets amxRun (the wrapper's
// bounds, tail copy and scratch layout) be checked on any machine against
// the contract, amxTileGo.
func amxEmu(cfg *byte, steps int, a *uint32, rs int, b *uint32, tail *uint32, sums *float32, c *float32, ldc int, alpha, beta float32, beta0 int) {
	conf := unsafe.Slice(cfg, 64)
	for i, v := range conf {
		want := byte(0)
		switch {
		case i == 0:
			want = 1 // palette 1
		case i >= 16 && i < 32 && i%2 == 0:
			want = 64 // colsb, low byte
		case i >= 48 && i < 56:
			want = 16 // rows
		}
		if v != want {
			panic(fmt.Sprintf("tile configuration byte %d = %d, want %d", i, v, want))
		}
	}
	var tiles [8][16][16]uint32
	load := func(t int, base unsafe.Pointer, stride int) {
		for r := range 16 {
			for col := range 16 {
				tiles[t][r][col] = *(*uint32)(unsafe.Add(base, r*stride+4*col))
			}
		}
	}
	dp := func(ct, at, bt int) {
		var ap, bp [16]uint32
		for m := range 16 {
			for n := range 16 {
				for k := range 16 {
					ap[k], bp[k] = tiles[at][m][k], tiles[bt][k][n]
				}
				acc := math.Float32frombits(tiles[ct][m][n])
				tiles[ct][m][n] = math.Float32bits(amxStepDot(amxLanes, acc, ap[:], bp[:]))
			}
		}
	}
	// Addresses as a base and a byte offset (the registers' values),
	// dereferenced only when loaded: past the last step they point past
	// the operands.
	step := func(ab unsafe.Pointer, si, r10 int, bb unsafe.Pointer, di, r8 int) {
		load(4, unsafe.Add(ab, si), r8)
		load(5, unsafe.Add(ab, r10), r8)
		load(6, unsafe.Add(bb, di), 128)
		load(7, unsafe.Add(bb, di+64), 128)
		dp(0, 4, 6)
		dp(1, 4, 7)
		dp(2, 5, 6)
		dp(3, 5, 7)
	}
	si, r10, di := 0, 16*rs, 0
	for range steps {
		step(unsafe.Pointer(a), si, r10, unsafe.Pointer(b), di, rs)
		si, r10, di = si+64, r10+64, di+2048
	}
	if tail != nil {
		t := unsafe.Pointer(tail)
		step(t, 0, 1024, t, 2048, 64)
	}
	sp := unsafe.Pointer(sums)
	for t, off := range []int{0, 64, 2048, 2112} {
		for r := range 16 {
			for col := range 16 {
				*(*uint32)(unsafe.Add(sp, off+r*128+4*col)) = tiles[t][r][col]
			}
		}
	}
	s := unsafe.Slice(sums, 32*32)
	cs := unsafe.Slice(c, 31*ldc+32)
	for r := range 32 {
		for j := range 32 {
			v := alpha * s[r*32+j]
			if beta0 == 0 {
				v = fma32(beta, cs[r*ldc+j], v)
			}
			cs[r*ldc+j] = v
		}
	}
}

// The wrapper around the assembly (bounds, the tail's zeroed scratch,
// the configuration, the arguments) on amxEmu is bitwise the contract,
// for whole steps, tails alone, steps and a tail, strides and both
// stores, with special values.
func TestAMXWrapperOnEmulation(t *testing.T) {
	rng := rand.New(rand.NewPCG(9, 10))
	for _, kp := range []int{1, 5, 15, 16, 17, 37, 144} {
		for _, extra := range []int{0, 3} {
			for _, beta0 := range []bool{true, false} {
				rs := kp + extra
				a := make([]uint32, 31*rs+kp)
				b := make([]uint32, 32*kp)
				for _, x := range [][]uint32{a, b} {
					for i := range x {
						x[i] = uint32(randBF16(rng, kp%2 == 1)) | uint32(randBF16(rng, kp%2 == 1))<<16
					}
				}
				const ldc = 41
				c := make([]float32, 31*ldc+32)
				for i := range c {
					c[i] = float32(rng.NormFloat64())
				}
				want := append([]float32(nil), c...)
				amxRun(amxEmu, kp, a, rs, b, c, ldc, 0.75, -1.5, beta0)
				amxTileGo(amxLanes, kp, a, rs, b, want, ldc, 0.75, -1.5, beta0)
				for i := range c {
					if !sameBits(c[i], want[i]) {
						t.Fatalf("kp=%d rs=%d beta0=%v: element %d (row %d col %d) = %g, want %g", kp, rs, beta0, i, i/ldc, i%ldc, c[i], want[i])
					}
				}
			}
		}
	}
}

// The pair-major form of an AMX-contract kernel (fn: the panel
// transposed into rows) is its row-major form on the same values.
func TestAMXPairMajorForm(t *testing.T) {
	rng := rand.New(rand.NewPCG(11, 12))
	k := amxGoKernel(amxLanes)
	for _, kp := range []int{1, 16, 21} {
		panel := make([]uint32, 32*kp)
		rows := make([]uint32, 32*kp)
		for q := range kp {
			for i := range 32 {
				v := uint32(randBF16(rng, false)) | uint32(randBF16(rng, false))<<16
				panel[q*32+i], rows[i*kp+q] = v, v
			}
		}
		b := make([]uint32, 32*kp)
		for i := range b {
			b[i] = uint32(randBF16(rng, false)) | uint32(randBF16(rng, false))<<16
		}
		got, want := make([]float32, 32*32), make([]float32, 32*32)
		k.fn(kp, panel, b, got, 32, 1, 0, true)
		k.strided(kp, rows, kp, b, want, 32, 1, 0, true)
		for i := range got {
			if !sameBits(got[i], want[i]) {
				t.Fatalf("kp=%d: element %d = %g, want %g", kp, i, got[i], want[i])
			}
		}
	}
}

// packRowsTr (with amxPackTr where the CPU has it) packs what the
// definition says, for whole and partial blocks of rows and pairs, odd
// k, zero rows past lines, and leaves the row stride's tail alone.
func TestPackRowsTr(t *testing.T) {
	rng := rand.New(rand.NewPCG(13, 14))
	for _, s := range []struct{ lines, rows, kcur, ld int }{
		{16, 16, 32, 16}, {32, 32, 64, 40}, {144, 144, 512, 150}, {33, 48, 95, 37}, {15, 16, 31, 15}, {47, 48, 100, 50}, {3, 32, 7, 5},
	} {
		src := randBF16s(rng, s.kcur*s.ld, false)
		dst := make([]uint32, s.rows*bf16RowStride)
		for i := range dst {
			dst[i] = 0xdeadbeef
		}
		packRowsTr(dst, src, 0, s.ld, s.lines, s.rows, s.kcur)
		kp := ceilDiv(s.kcur, 2)
		for i := range s.rows {
			for q := range bf16RowStride {
				var want uint32 = 0xdeadbeef
				switch {
				case q >= kp:
				case i >= s.lines:
					want = 0
				default:
					want = uint32(src[2*q*s.ld+i])
					if 2*q+1 < s.kcur {
						want |= uint32(src[(2*q+1)*s.ld+i]) << 16
					}
				}
				if got := dst[i*bf16RowStride+q]; got != want {
					t.Fatalf("%+v: row %d pair %d = %#x, want %#x", s, i, q, got, want)
				}
			}
		}
	}
}
