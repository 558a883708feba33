package gemm

import (
	"bufio"
	"bytes"
	"fmt"
	"github.com/headroom-ml/headroom/internal/parallel"
	"math"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
)

// refBF16Kernel is a portable bf16Kernel with the reference arithmetic.
func refBF16Kernel(mr, nr int) *bf16Kernel {
	return &bf16Kernel{name: fmt.Sprintf("ref %dx%d", mr, nr), mr: mr, nr: nr,
		fn: func(kp int, a, b []uint32, c []float32, ldc int, alpha, beta float32, beta0 bool) {
			for i := 0; i < mr; i++ {
				for j := 0; j < nr; j++ {
					var acc float32
					for q := 0; q < kp; q++ {
						acc = bf16DotPair(acc, a[q*mr+i], b[q*nr+j])
					}
					c[i*ldc+j] = bf16Store(alpha, beta, acc, c[i*ldc+j], beta0)
				}
			}
		}}
}

// vdpBF16Kernels are the VDPBF16PS kernels of bf16Kernels (the AMX
// kernel has its own reference and tests, amx_test.go).
func vdpBF16Kernels() []*bf16Kernel {
	var ks []*bf16Kernel
	for _, k := range bf16Kernels() {
		if !k.amx {
			ks = append(ks, k)
		}
	}
	return ks
}

func useBF16Kern(k *bf16Kernel) (restore func()) {
	old := bf16Kern
	bf16Kern = k
	return func() { bf16Kern = old }
}

// sameBits compares as the tests of the bf16 kernels do: bitwise, any
// NaN equal to any NaN (NaN payloads follow x86's operand priorities,
// which the reference does not model).
func sameBits(x, y float32) bool {
	if math.IsNaN(float64(x)) {
		return math.IsNaN(float64(y))
	}
	return math.Float32bits(x) == math.Float32bits(y)
}

func bf(f float32) uint16 { return uint16(math.Float32bits(f) >> 16) }

func pairOf(lo, hi float32) uint32 { return uint32(bf(lo)) | uint32(bf(hi))<<16 }

// Each rule of the reference, on a case that tells it from the
// alternatives; every case is also run through the assembly kernels.
func TestBF16DotPairCases(t *testing.T) {
	bfDen := math.Float32frombits(uint32(0x0040) << 16)
	cases := []struct {
		name  string
		pairs [][2]uint32 // (a, b) per pair of k, from acc = +0
		want  float32
	}{
		// 1, then + 2^-24 (a tie, to 1) and + 2^-24 again: 1, where one
		// rounding of the pair's sum would give 1 + 2^-23.
		{"two roundings", [][2]uint32{{pairOf(0, 1), pairOf(0, 1)}, {pairOf(0x1p-24, 0x1p-24), pairOf(1, 1)}}, 1},
		// 1, then the odd k's 2^-24 (to 1) before the even k's 2^-23: 1 +
		// 2^-23; the other order would give 1 + 2^-22 (a tie to even).
		{"odd k first", [][2]uint32{{pairOf(0, 1), pairOf(0, 1)}, {pairOf(0x1p-23, 0x1p-24), pairOf(1, 1)}}, 1 + 0x1p-23},
		// A denormal bf16 input counts as zero.
		{"DAZ", [][2]uint32{{pairOf(bfDen, 0), pairOf(0x1p100, 0)}}, 0},
		// A product below 2^-126 is kept exactly: 2^-126 + 1.5*2^-150
		// rounds up to 2^-126 + 2^-149.
		{"tiny product kept", [][2]uint32{{pairOf(0, 0x1p-63), pairOf(0, 0x1p-63)}, {pairOf(0, 0x1.8p-75), pairOf(0, 0x1p-75)}}, 0x1p-126 + 0x1p-149},
		// A sum below 2^-126 is flushed: 2^-125 - 1.5*2^-126.
		{"FTZ", [][2]uint32{{pairOf(0, 0x1p-62), pairOf(0, 0x1p-63)}, {pairOf(0, -0x1.8p-63), pairOf(0, 0x1p-63)}}, 0},
		// Tininess after rounding with an unbounded exponent: 2^-126 -
		// 1.5*2^-151 rounds to 2^-126 - 2^-150 (tiny: flushed), though on
		// the denormal grid it would round to 2^-126.
		{"tiny after rounding", [][2]uint32{{pairOf(0, 0x1p-63), pairOf(0, 0x1p-63)}, {pairOf(0, -0x1.8p-76), pairOf(0, 0x1p-75)}}, 0},
		// Overflow of a product is infinite.
		{"overflow", [][2]uint32{{pairOf(0, 0x1p100), pairOf(0, 0x1p100)}}, float32(math.Inf(1))},
		{"inf times zero", [][2]uint32{{pairOf(0, float32(math.Inf(1))), pairOf(0, 0)}}, float32(math.NaN())},
	}
	kernels := append([]*bf16Kernel{refBF16Kernel(1, 1)}, vdpBF16Kernels()...)
	for _, tc := range cases {
		for _, kern := range kernels {
			kp := len(tc.pairs)
			a := make([]uint32, kern.mr*kp)
			b := make([]uint32, kern.nr*kp)
			for q, p := range tc.pairs {
				a[q*kern.mr] = p[0]
				b[q*kern.nr] = p[1]
			}
			c := make([]float32, kern.mr*kern.nr)
			kern.fn(kp, a, b, c, kern.nr, 1, 0, true)
			if !sameBits(c[0], tc.want) {
				t.Errorf("%s on %s: got %g (%#08x), want %g", tc.name, kern.name, c[0], math.Float32bits(c[0]), tc.want)
			}
		}
	}
}

// randBF16 is a random bf16 stressing the kernels' rounding: mostly values
// near 1 over a range of exponents wide enough for sums to round, and
// sometimes tiny, denormal, huge, zero, infinite or NaN ones (special
// false: finite normal values only).
func randBF16(rng *rand.Rand, special bool) uint16 {
	e := 127 + rng.IntN(30) - 15
	if special {
		switch rng.IntN(40) {
		case 0:
			e = rng.IntN(20) // tiny, denormal (0) and zero
		case 1:
			e = 254 - rng.IntN(8)
		case 2:
			e = 255 // Inf and NaN
		}
	}
	return uint16(rng.IntN(2))<<15 | uint16(e)<<7 | uint16(rng.IntN(128))
}

// The assembly kernels are bitwise the reference on random panels with
// special values, at several depths (the unrolled loop and its tail) and
// for both stores.
func TestBF16KernelRandom(t *testing.T) {
	ks := vdpBF16Kernels()
	if len(ks) == 0 {
		t.Skip("no native bf16 kernel on this CPU")
	}
	rng := rand.New(rand.NewPCG(3, 4))
	for _, kern := range ks {
		ref := refBF16Kernel(kern.mr, kern.nr)
		for _, kp := range []int{1, 2, 3, 4, 5, 8, 13, 64} {
			for _, beta0 := range []bool{true, false} {
				a := make([]uint32, kern.mr*kp)
				b := make([]uint32, kern.nr*kp)
				for i := range a {
					a[i] = uint32(randBF16(rng, true)) | uint32(randBF16(rng, true))<<16
				}
				for i := range b {
					b[i] = uint32(randBF16(rng, true)) | uint32(randBF16(rng, true))<<16
				}
				const ldc = 67
				c := make([]float32, (kern.mr-1)*ldc+kern.nr)
				for i := range c {
					c[i] = float32(rng.NormFloat64())
				}
				want := append([]float32(nil), c...)
				alpha, beta := float32(0.75), float32(-1.5)
				kern.fn(kp, a, b, c, ldc, alpha, beta, beta0)
				ref.fn(kp, a, b, want, ldc, alpha, beta, beta0)
				for i := range c {
					if !sameBits(c[i], want[i]) {
						t.Fatalf("%s kp=%d beta0=%v: element %d (row %d col %d) = %g (%#08x), want %g (%#08x)", kern.name, kp, beta0, i, i/ldc, i%ldc, c[i], math.Float32bits(c[i]), want[i], math.Float32bits(want[i]))
					}
				}
			}
		}
	}
}

// refGemmBF16 is SgemmMixed's native product by the definition: element by
// element, K blocks of bf16Block(k) values, pairs in order.
func refGemmBF16(transA, transB bool, m, n, k int, alpha float32, a []uint16, lda int, b []uint16, ldb int, beta float32, c []float32, ldc int) {
	at := func(i, p int) uint16 {
		if p >= k {
			return 0
		}
		if transA {
			return a[p*lda+i]
		}
		return a[i*lda+p]
	}
	bt := func(p, j int) uint16 {
		if p >= k {
			return 0
		}
		if transB {
			return b[j*ldb+p]
		}
		return b[p*ldb+j]
	}
	kc := bf16Block(k)
	for i := 0; i < m; i++ {
		for j := 0; j < n; j++ {
			cv := c[i*ldc+j]
			for pc := 0; pc < k; pc += kc {
				var acc float32
				for p := pc; p < min(k, pc+kc); p += 2 {
					acc = bf16DotPair(acc, uint32(at(i, p))|uint32(at(i, p+1))<<16, uint32(bt(p, j))|uint32(bt(p+1, j))<<16)
				}
				betaCur := beta
				if pc > 0 {
					betaCur = 1
				}
				cv = bf16Store(alpha, betaCur, acc, cv, betaCur == 0)
			}
			c[i*ldc+j] = cv
		}
	}
}

func randBF16s(rng *rand.Rand, n int, special bool) []uint16 {
	x := make([]uint16, n)
	for i := range x {
		x[i] = randBF16(rng, special)
	}
	return x
}

// The bf16 cases: Sgemm's table (edges, transposes, strides, scalars) and
// shapes that cross the bf16 blocking (K blocks of bf16KC, odd k).
func bf16Cases() []gemmCase {
	cs := cases()
	for _, s := range [][3]int{{30, 40, 1025}, {25, 33, 513}, {200, 150, 1100}, {2000, 40, 30}} {
		for _, tr := range [][2]bool{{false, false}, {true, true}} {
			cs = append(cs, gemmCase{m: s[0], n: s[1], k: s[2], transA: tr[0], transB: tr[1], padA: 1, padB: 3, padC: 2, alpha: -0.5, beta: 1.25})
		}
	}
	return cs
}

// SgemmMixed with bfloat16 A and B on each native kernel (and the driver
// on portable reference kernels of other tile sizes) is bitwise the
// reference, on 1 and 2 threads.
func TestSgemmBF16(t *testing.T) {
	kernels := append(vdpBF16Kernels(), refBF16Kernel(4, 8), refBF16Kernel(3, 16))
	for _, kern := range kernels {
		isRef := strings.HasPrefix(kern.name, "ref")
		for ci, tc := range bf16Cases() {
			if isRef && tc.m*tc.n*tc.k > 2e5 || testing.Short() && tc.m*tc.n*tc.k > 2e6 {
				continue
			}
			rng := rand.New(rand.NewPCG(uint64(ci), 12))
			mt := makeMats(tc, rng)
			special := ci%3 == 0
			a := randBF16s(rng, len(mt.a), special)
			b := randBF16s(rng, len(mt.b), special)
			c0 := to32(mt.c)
			want := append([]float32(nil), c0...)
			refGemmBF16(tc.transA, tc.transB, tc.m, tc.n, tc.k, float32(tc.alpha), a, mt.lda, b, mt.ldb, float32(tc.beta), want, mt.ldc)
			for _, threads := range []int{1, 2} {
				got := append([]float32(nil), c0...)
				func() {
					defer useBF16Kern(kern)()
					SgemmMixed(tc.transA, tc.transB, tc.m, tc.n, tc.k, float32(tc.alpha), BF16(a), mt.lda, BF16(b), mt.ldb, float32(tc.beta), got, mt.ldc, parallel.NewPool(threads))
				}()
				for i := range want {
					if !sameBits(got[i], want[i]) {
						t.Fatalf("%s t%d %v: element %d = %g (%#08x), want %g (%#08x)", kern.name, threads, tc, i, got[i], math.Float32bits(got[i]), want[i], math.Float32bits(want[i]))
					}
				}
			}
		}
	}
}

// The native product agrees with the widened float32 one (Sgemm on the
// operands converted) within float32 accumulation's error: both round
// each partial sum once per k value (the native kernel twice per pair),
// so |native - widened| <= 2 k u sum|alpha a b| + u |beta c| with u =
// 2^-24, and in practice far less.
func TestSgemmBF16VersusFloat32(t *testing.T) {
	if bf16Kern == nil {
		t.Skip("no native bf16 kernel in use")
	}
	for ci, tc := range bf16Cases() {
		if testing.Short() && tc.m*tc.n*tc.k > 2e6 {
			continue
		}
		rng := rand.New(rand.NewPCG(uint64(ci), 13))
		mt := makeMats(tc, rng)
		a := randBF16s(rng, len(mt.a), false)
		b := randBF16s(rng, len(mt.b), false)
		af, bf := make([]float32, len(a)), make([]float32, len(b))
		Widen(BFloat16, af, a)
		Widen(BFloat16, bf, b)
		c0 := to32(mt.c)
		got := append([]float32(nil), c0...)
		SgemmMixed(tc.transA, tc.transB, tc.m, tc.n, tc.k, float32(tc.alpha), BF16(a), mt.lda, BF16(b), mt.ldb, float32(tc.beta), got, mt.ldc)
		want := append([]float32(nil), c0...)
		Sgemm(tc.transA, tc.transB, tc.m, tc.n, tc.k, float32(tc.alpha), af, mt.lda, bf, mt.ldb, float32(tc.beta), want, mt.ldc)
		af64, bf64 := make([]float64, len(af)), make([]float64, len(bf))
		for i, v := range af {
			af64[i] = float64(v)
		}
		for i, v := range bf {
			bf64[i] = float64(v)
		}
		_, scale := reference(tc, mats{a: af64, b: bf64, c: mt.c, lda: mt.lda, ldb: mt.ldb, ldc: mt.ldc})
		var worst float64
		for i := range want {
			if scale[i] == 0 {
				continue
			}
			d := math.Abs(float64(got[i])-float64(want[i])) / scale[i]
			worst = max(worst, d)
			if lim := float64(2*tc.k+1) * 0x1p-24; d > lim {
				t.Fatalf("%v: element %d = %g, widened %g: %.3g of the scale, over %.3g", tc, i, got[i], want[i], d, lim)
			}
		}
	}
}

// The VDPBF16PS bytes in bf16_amd64.s are GNU as's for the instruction in
// each one's comment: a few checked against bytes as gave (binutils 2.x),
// and all of them against as itself where it is installed.
func TestBF16Encoding(t *testing.T) {
	src, err := os.ReadFile("bf16_amd64.s")
	if err != nil {
		t.Fatal(err)
	}
	line := regexp.MustCompile(`^\s*((?:BYTE \$0x[0-9a-f]{2}(?:; )?)+) // (vdpbf16ps .*)$`)
	enc := map[string]string{} // instruction -> hex bytes
	var order []string
	sc := bufio.NewScanner(bytes.NewReader(src))
	for sc.Scan() {
		m := line.FindStringSubmatch(sc.Text())
		if m == nil {
			continue
		}
		hex := strings.NewReplacer("BYTE $0x", "", ";", "").Replace(m[1])
		ins := strings.Replace(m[2], " 0(", " (", 1)
		if _, ok := enc[ins]; !ok {
			order = append(order, ins)
		}
		enc[ins] = strings.Join(strings.Fields(hex), " ")
	}
	if len(enc) < 100 {
		t.Fatalf("found %d encoded instructions in bf16_amd64.s", len(enc))
	}
	for ins, want := range map[string]string{
		"vdpbf16ps (%rsi){1to16}, %zmm24, %zmm0":     "62 f2 3e 50 52 06",
		"vdpbf16ps 4(%rsi){1to16}, %zmm24, %zmm1":    "62 f2 3e 50 52 4e 01",
		"vdpbf16ps 92(%rsi){1to16}, %zmm24, %zmm23":  "62 e2 3e 50 52 7e 17",
		"vdpbf16ps 380(%rsi){1to16}, %zmm28, %zmm23": "62 e2 1e 50 52 7e 5f",
		"vdpbf16ps 188(%rsi){1to16}, %zmm29, %zmm23": "62 e2 16 50 52 7e 2f",
		"vdpbf16ps 8(%rsi){1to16}, %zmm25, %zmm5":    "62 f2 36 50 52 6e 02",
	} {
		if got, ok := enc[ins]; !ok {
			t.Errorf("%s not in bf16_amd64.s", ins)
		} else if got != want {
			t.Errorf("%s: encoded %s, as gives %s", ins, got, want)
		}
	}
	as, err1 := exec.LookPath("as")
	objdump, err2 := exec.LookPath("objdump")
	if err1 != nil || err2 != nil {
		t.Log("GNU as or objdump not found: checked the table only")
		return
	}
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "t.s"), []byte(strings.Join(order, "\n")+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command(as, "-o", filepath.Join(dir, "t.o"), filepath.Join(dir, "t.s")).CombinedOutput(); err != nil {
		t.Skipf("as failed (too old for AVX512_BF16?): %v %s", err, out)
	}
	out, err := exec.Command(objdump, "-d", filepath.Join(dir, "t.o")).Output()
	if err != nil {
		t.Fatal(err)
	}
	// objdump lines: "  off:\tbytes \tmnemonic", bytes possibly continued
	// on a line of their own.
	var all []string
	for _, l := range strings.Split(string(out), "\n") {
		f := strings.Split(l, "\t")
		if len(f) >= 2 && strings.HasSuffix(strings.TrimSpace(f[0]), ":") {
			all = append(all, strings.Fields(f[1])...)
		}
	}
	var want []string
	for _, ins := range order {
		want = append(want, enc[ins])
	}
	if got := strings.Join(all, " "); got != strings.Join(want, " ") {
		t.Errorf("as assembles the comments to other bytes:\n as: %.200s\ngen: %.200s", got, strings.Join(want, " "))
	}
}

// The summary and the capabilities say whether the native kernel runs.
func TestBF16Reported(t *testing.T) {
	for _, k := range []*bf16Kernel{nil, refBF16Kernel(4, 4)} {
		func() {
			defer useBF16Kern(k)()
			s := KernelSummary()
			if native := strings.Contains(s, "VDPBF16PS"); native != (k != nil) {
				t.Errorf("kernel %v: KernelSummary() = %q", k != nil, s)
			}
			if Caps().NativeBF16 != (k != nil) {
				t.Errorf("kernel %v: Caps().NativeBF16 = %v", k != nil, Caps().NativeBF16)
			}
		}()
	}
}

// The packings with assembly (bf16Ilv24, the row-major A copy) give what
// their portable loops give, for even and odd depths.
func TestBF16PackForms(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	const ld = 61
	src := randBF16s(rng, 40*ld, false)
	for _, kcur := range []int{1, 2, 7, 38} {
		kp := ceilDiv(kcur, 2)
		got := make([]uint32, kp*24)
		packPairsIlv(got, 24, src, 3, ld, 24, kcur)
		for q := 0; q < kp; q++ {
			for l := 0; l < 24; l++ {
				want := uint32(src[3+2*q*ld+l])
				if 2*q+1 < kcur {
					want |= uint32(src[3+(2*q+1)*ld+l]) << 16
				}
				if got[q*24+l] != want {
					t.Fatalf("packPairsIlv kcur %d: pair %d lane %d = %#x, want %#x", kcur, q, l, got[q*24+l], want)
				}
			}
		}
		rows := make([]uint32, 24*bf16RowStride)
		for i := range rows {
			rows[i] = 0xdeadbeef
		}
		for _, off := range []int{0, 1} { // 4-byte aligned pairs, and not
			packRows(rows, src, off, ld, 20, 24, kcur)
			for i := 0; i < 24; i++ {
				for q := 0; q < kp; q++ {
					var want uint32
					if i < 20 {
						want = uint32(src[off+i*ld+2*q])
						if 2*q+1 < kcur {
							want |= uint32(src[off+i*ld+2*q+1]) << 16
						}
					}
					if got := rows[i*bf16RowStride+q]; got != want {
						t.Fatalf("packRows kcur %d off %d: row %d pair %d = %#x, want %#x", kcur, off, i, q, got, want)
					}
				}
			}
		}
	}
}

// A kernel's row-major-A form and its pair-major one give the same bits
// (TestSgemmBF16 runs the kernels as SgemmMixed picks their forms).
func TestSgemmBF16RowForm(t *testing.T) {
	for _, kern := range vdpBF16Kernels() {
		if kern.rows == nil {
			continue
		}
		packed := *kern
		packed.rows = nil
		for ci, tc := range bf16Cases() {
			if tc.transA || testing.Short() && tc.m*tc.n*tc.k > 2e6 {
				continue
			}
			rng := rand.New(rand.NewPCG(uint64(ci), 13))
			mt := makeMats(tc, rng)
			a := randBF16s(rng, len(mt.a), ci%3 == 0)
			b := randBF16s(rng, len(mt.b), ci%3 == 0)
			c0 := to32(mt.c)
			var outs [2][]float32
			for i, k := range []*bf16Kernel{kern, &packed} {
				outs[i] = append([]float32(nil), c0...)
				func() {
					defer useBF16Kern(k)()
					SgemmMixed(tc.transA, tc.transB, tc.m, tc.n, tc.k, float32(tc.alpha), BF16(a), mt.lda, BF16(b), mt.ldb, float32(tc.beta), outs[i], mt.ldc, parallel.NewPool(2))
				}()
			}
			for i := range outs[0] {
				if !sameBits(outs[0][i], outs[1][i]) {
					t.Fatalf("%s %v: element %d: rows %g, packed %g", kern.name, tc, i, outs[0][i], outs[1][i])
				}
			}
		}
	}
}

// packPairsTr (16x16 transposes in assembly) packs as packPairsAdj's
// portable loop does.
func TestBF16PackTr(t *testing.T) {
	rng := rand.New(rand.NewPCG(5, 6))
	const ld = 131
	src := randBF16s(rng, 17*ld, false)
	old := gatherAsm
	defer func() { gatherAsm = old }()
	for _, kcur := range []int{1, 31, 32, 33, 64, 95, 128} {
		for _, off := range []int{0, 1, ld + 2} {
			for _, lanes := range []int{16, 9} {
				kp := ceilDiv(kcur, 2)
				got, want := make([]uint32, kp*16), make([]uint32, kp*16)
				packPairsTr(got, src, off, ld, lanes, kcur)
				gatherAsm = nil
				packPairsAdj(want, 16, src, off, ld, lanes, kcur)
				gatherAsm = old
				if !slices.Equal(got, want) {
					t.Fatalf("kcur %d off %d lanes %d: packPairsTr differs from packPairsAdj", kcur, off, lanes)
				}
			}
		}
	}
}

// Products deeper than one K block (B packed a block at a time, C
// accumulated across blocks) give the reference's bits, on 1 and 2
// threads.
func TestSgemmBF16KBlocks(t *testing.T) {
	if bf16Kern == nil {
		t.Skip("no native bf16 kernel in use")
	}
	defer useBF16Kern(bf16TileKern())() // VDPBF16PS's arithmetic (AMX: amx_test.go)
	for ci, tc := range bf16Cases() {
		if tc.k <= bf16KC || testing.Short() && tc.m*tc.n*tc.k > 2e7 {
			continue
		}
		rng := rand.New(rand.NewPCG(uint64(ci), 14))
		mt := makeMats(tc, rng)
		a := randBF16s(rng, len(mt.a), false)
		b := randBF16s(rng, len(mt.b), false)
		c0 := to32(mt.c)
		want := append([]float32(nil), c0...)
		refGemmBF16(tc.transA, tc.transB, tc.m, tc.n, tc.k, float32(tc.alpha), a, mt.lda, b, mt.ldb, float32(tc.beta), want, mt.ldc)
		for _, threads := range []int{1, 2} {
			got := append([]float32(nil), c0...)
			SgemmMixed(tc.transA, tc.transB, tc.m, tc.n, tc.k, float32(tc.alpha), BF16(a), mt.lda, BF16(b), mt.ldb, float32(tc.beta), got, mt.ldc, parallel.NewPool(threads))
			for i := range want {
				if !sameBits(got[i], want[i]) {
					t.Fatalf("t%d %v: element %d = %g, want %g", threads, tc, i, got[i], want[i])
				}
			}
		}
	}
}

// A transposed A's product split among threads by columns (each thread
// packing its own B panels; gpt's weight gradient 384×1536×2048), and a
// product with few columns split by M blocks with B packed by each thread
// (gpt's 1536×384×2048), are bitwise the reference and the shared split:
// shapes with edge tiles, odd k and several K blocks, A and B plain and
// transposed, on 2 and 3 threads.
func TestSgemmBF16ColSplit(t *testing.T) {
	if bf16Kern == nil {
		t.Skip("no native bf16 kernel in use")
	}
	defer useBF16Kern(bf16TileKern())() // VDPBF16PS's arithmetic (AMX: amx_test.go)
	defer func(c, r bool) { bf16ColSplit, bf16RowPriv = c, r }(bf16ColSplit, bf16RowPriv)
	for ci, tc := range []gemmCase{
		{m: 160, n: 24, k: 1200, transA: true},
		{m: 203, n: 29, k: 1025, padA: 1, padB: 3, padC: 2, alpha: -0.5, beta: 1.25},
		{m: 77, n: 12, k: 1555, transB: true, padA: 2, padB: 1, padC: 1, alpha: 1, beta: 0},
		{m: 400, n: 48, k: 512, transA: true, transB: true, alpha: 2, beta: 0.5},
		{m: 24, n: 160, k: 1200, transA: true},
		{m: 29, n: 203, k: 1025, transA: true, padA: 1, padB: 3, padC: 2, alpha: -0.5, beta: 1.25},
		{m: 12, n: 77, k: 1555, transA: true, transB: true, padA: 2, padB: 1, padC: 1, alpha: 1, beta: 0},
		{m: 48, n: 400, k: 512, transA: true, alpha: 2, beta: 0.5},
	} {
		if tc.alpha == 0 {
			tc.alpha = 1
		}
		rng := rand.New(rand.NewPCG(uint64(ci), 15))
		mt := makeMats(tc, rng)
		a := randBF16s(rng, len(mt.a), ci%2 == 0)
		b := randBF16s(rng, len(mt.b), ci%2 == 0)
		c0 := to32(mt.c)
		want := append([]float32(nil), c0...)
		refGemmBF16(tc.transA, tc.transB, tc.m, tc.n, tc.k, float32(tc.alpha), a, mt.lda, b, mt.ldb, float32(tc.beta), want, mt.ldc)
		for _, split := range []bool{true, false} {
			bf16ColSplit, bf16RowPriv = split, split
			for _, threads := range []int{2, 3} {
				got := append([]float32(nil), c0...)
				SgemmMixed(tc.transA, tc.transB, tc.m, tc.n, tc.k, float32(tc.alpha), BF16(a), mt.lda, BF16(b), mt.ldb, float32(tc.beta), got, mt.ldc, parallel.NewPool(threads))
				for i := range want {
					if !sameBits(got[i], want[i]) {
						t.Fatalf("split %v t%d %v: element %d = %g (%#08x), want %g (%#08x)", split, threads, tc, i, got[i], math.Float32bits(got[i]), want[i], math.Float32bits(want[i]))
					}
				}
			}
		}
	}
}

// The bf16 driver's paths, each bitwise the reference on 1, 2 and 3
// threads: a strided A whose last M block has an edge tile (whole tiles
// read in place, the edge copied), B panels a cache line apart in K
// blocks of different depths (the shallower last block's panels where
// the deeper ones were), the split by M blocks with B packed by each
// thread (m >= n) and by columns (n >= 2*threads*m) running all K blocks
// without waits, and a transposed A packed by blocks of tiles (whole and
// edge tiles, odd k).
func TestSgemmBF16Paths(t *testing.T) {
	if bf16Kern == nil {
		t.Skip("no native bf16 kernel in use")
	}
	defer useBF16Kern(bf16TileKern())() // VDPBF16PS's arithmetic (AMX: amx_test.go)
	for ci, tc := range []gemmCase{
		{m: 200, n: 40, k: 96},                                    // strided A, edge tile of 8 rows
		{m: 208, n: 48, k: 1100, beta: -1},                        // edge tile of 16 rows, 3 K blocks
		{m: 211, n: 17, k: 600, padA: 2, alpha: 3},                // edge tile of 19 rows: copied
		{m: 48, n: 48, k: 1100},                                   // whole tiles only, 3 K blocks
		{m: 301, n: 70, k: 1100, padA: 2},                         // strided, edge tile, K blocks 368/368/364
		{m: 301, n: 70, k: 1101, padA: 1},                         // odd lda: A's rows copied
		{m: 130, n: 130, k: 1030, transB: true, beta: 0.5},        // m >= n, B transposed, 2 K blocks
		{m: 290, n: 33, k: 1537, padB: 5, alpha: -1, beta: 1},     // odd k: the last block's edge pair
		{m: 150, n: 150, k: 600, transA: true},                    // transposed A, edge tile of 6 rows
		{m: 48, n: 300, k: 1100, transA: true, padC: 3},           // split by columns, 3 K blocks
		{m: 29, n: 203, k: 1025, transA: true, transB: true},      // by columns, odd k, edge tiles
		{m: 1000, n: 20, k: 1537, transA: true, padA: 3, beta: 2}, // many tiles side by side, odd k
	} {
		if tc.alpha == 0 {
			tc.alpha = 1
		}
		rng := rand.New(rand.NewPCG(uint64(ci), 16))
		mt := makeMats(tc, rng)
		a := randBF16s(rng, len(mt.a), ci%3 == 0)
		b := randBF16s(rng, len(mt.b), ci%3 == 0)
		c0 := to32(mt.c)
		want := append([]float32(nil), c0...)
		refGemmBF16(tc.transA, tc.transB, tc.m, tc.n, tc.k, float32(tc.alpha), a, mt.lda, b, mt.ldb, float32(tc.beta), want, mt.ldc)
		for _, threads := range []int{1, 2, 3} {
			got := append([]float32(nil), c0...)
			SgemmMixed(tc.transA, tc.transB, tc.m, tc.n, tc.k, float32(tc.alpha), BF16(a), mt.lda, BF16(b), mt.ldb, float32(tc.beta), got, mt.ldc, parallel.NewPool(threads))
			for i := range want {
				if !sameBits(got[i], want[i]) {
					t.Fatalf("t%d %v: element %d = %g (%#08x), want %g (%#08x)", threads, tc, i, got[i], math.Float32bits(got[i]), want[i], math.Float32bits(want[i]))
				}
			}
		}
	}
}

// The strided kernels of fewer rows (bf16Kernel.stridedEdge) are bitwise
// the reference on random rows of pairs a stride apart, special values
// included, at several depths and for both stores.
func TestBF16StridedEdgeKernels(t *testing.T) {
	if bf16Kern == nil || len(bf16Kern.stridedEdge) == 0 {
		t.Skip("no strided edge kernels")
	}
	rng := rand.New(rand.NewPCG(17, 18))
	nr := bf16Kern.nr
	for mr, f := range bf16Kern.stridedEdge {
		ref := refBF16Kernel(mr, nr)
		for _, kp := range []int{1, 3, 4, 9, 64} {
			for _, beta0 := range []bool{true, false} {
				rs := kp + 5
				a := make([]uint32, (mr-1)*rs+kp)
				for i := range a {
					a[i] = uint32(randBF16(rng, true)) | uint32(randBF16(rng, true))<<16
				}
				packed := make([]uint32, mr*kp) // pair-major, as ref reads A
				for i := range mr {
					for q := range kp {
						packed[q*mr+i] = a[i*rs+q]
					}
				}
				b := make([]uint32, nr*kp)
				for i := range b {
					b[i] = uint32(randBF16(rng, true)) | uint32(randBF16(rng, true))<<16
				}
				const ldc = 37
				c := make([]float32, (mr-1)*ldc+nr)
				for i := range c {
					c[i] = float32(rng.NormFloat64())
				}
				want := append([]float32(nil), c...)
				f(kp, a, rs, b, c, ldc, 0.75, -1.5, beta0)
				ref.fn(kp, packed, b, want, ldc, 0.75, -1.5, beta0)
				for i := range c {
					if !sameBits(c[i], want[i]) {
						t.Fatalf("%d rows kp=%d beta0=%v: element %d (row %d col %d) = %g, want %g", mr, kp, beta0, i, i/ldc, i%ldc, c[i], want[i])
					}
				}
			}
		}
	}
}
