//go:build amd64 && !purego

package gemm

import (
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"os/exec"
	"reflect"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/headroom-ml/headroom/internal/parallel"
)

// On a machine where the AMX kernel runs (CPUID, the OS's permission, the
// self-check), the assembly is bitwise its Go contract, kernel by kernel
// (steps, tails, strides, stores, special values) and through the driver
// on amxCases, 1 and 2 threads. The contract's model is the one the
// self-check found bitwise; where it found neither, this fails, saying
// how far the hardware is from the SDM's text. Elsewhere it skips with
// the reason.
func TestAMXAsm(t *testing.T) {
	kern := amxKernel()
	_, why := AMXStatus()
	if kern == nil {
		t.Skip("AMX kernel does not run here: " + why)
	}
	if !strings.Contains(why, "bitwise") || strings.Contains(why, "not bitwise") {
		t.Fatalf("the AMX kernel runs within tolerance but matches no model bitwise: %s", why)
	}
	ref := amxGoKernel(amxModelK)
	rng := rand.New(rand.NewPCG(5, 6))
	for _, kp := range []int{1, 15, 16, 17, 31, 32, 100, 256} {
		for _, beta0 := range []bool{true, false} {
			rs := kp + 5
			a := make([]uint32, 31*rs+kp)
			b := make([]uint32, 32*kp)
			for _, x := range [][]uint32{a, b} {
				for i := range x {
					x[i] = uint32(randBF16(rng, true)) | uint32(randBF16(rng, true))<<16
				}
			}
			const ldc = 37
			c := make([]float32, 31*ldc+32)
			for i := range c {
				c[i] = float32(rng.NormFloat64())
			}
			want := append([]float32(nil), c...)
			kern.strided(kp, a, rs, b, c, ldc, 0.75, -1.5, beta0)
			ref.strided(kp, a, rs, b, want, ldc, 0.75, -1.5, beta0)
			for i := range c {
				if !sameBits(c[i], want[i]) {
					t.Fatalf("kp=%d beta0=%v: element %d (row %d col %d) = %g (%#08x), want %g (%#08x)", kp, beta0, i, i/ldc, i%ldc, c[i], math.Float32bits(c[i]), want[i], math.Float32bits(want[i]))
				}
			}
		}
	}
	for ci, tc := range amxCases {
		rng := rand.New(rand.NewPCG(uint64(ci), 22))
		mt := makeMats(tc, rng)
		a := randBF16s(rng, len(mt.a), ci%3 == 0)
		b := randBF16s(rng, len(mt.b), ci%3 == 0)
		c0 := to32(mt.c)
		for _, threads := range []int{1, 2} {
			run := func(k *bf16Kernel) []float32 {
				defer useBF16Kern(k)()
				c := append([]float32(nil), c0...)
				SgemmMixed(tc.transA, tc.transB, tc.m, tc.n, tc.k, float32(tc.alpha), BF16(a), mt.lda, BF16(b), mt.ldb, float32(tc.beta), c, mt.ldc, parallel.NewPool(threads))
				return c
			}
			got, want := run(kern), run(ref)
			for i := range want {
				if !sameBits(got[i], want[i]) {
					t.Fatalf("t%d %v: element %d = %g (%#08x), want %g (%#08x)", threads, tc, i, got[i], math.Float32bits(got[i]), want[i], math.Float32bits(want[i]))
				}
			}
		}
	}
}

// The AMX instructions of amxKernel32x32 as linked into this test binary
// (Go's assembler having emitted the BYTE directives among its own
// instructions) are, disassembled by GNU objdump, the generator's
// comments in order: nothing lost or misplaced between the generated
// file and the code that runs.
func TestAMXLinkedCode(t *testing.T) {
	objdump, err := exec.LookPath("objdump")
	if err != nil {
		t.Skip("GNU objdump (binutils) not installed")
	}
	exe, err := os.Executable()
	if err != nil {
		t.Skip(err)
	}
	// go test strips the symbols: find the code from the function
	// value, the ABIInternal wrapper, whose call is to the assembly.
	dis := func(from, to uintptr) string {
		out, err := exec.Command(objdump, "-d", "-M", "intel", fmt.Sprintf("--start-address=%#x", from), fmt.Sprintf("--stop-address=%#x", to), exe).CombinedOutput()
		if err != nil {
			t.Skipf("objdump on the test binary: %v\n%s", err, out)
		}
		return string(out)
	}
	wrapper := reflect.ValueOf(amxKernel32x32).Pointer()
	call := regexp.MustCompile(`\tcall\s+(?:0x)?([0-9a-f]+)`).FindStringSubmatch(dis(wrapper, wrapper+256))
	if call == nil {
		t.Skip("no call in amxKernel32x32's wrapper (a position-independent binary?)")
	}
	target, _ := strconv.ParseUint(call[1], 16, 64)
	start, size := uint64(target), uint64(1024)
	out := dis(uintptr(start), uintptr(start+size))
	if i := strings.Index(out, "\tret"); i >= 0 {
		out = out[:i] // the kernel's one return ends it
	}
	amxOp := regexp.MustCompile(`\t((?:ldtilecfg|tilezero|tileloadd|tilestored|tdpbf16ps|tilerelease)\b.*)$`)
	var got []string
	for _, l := range strings.Split(string(out), "\n") {
		if m := amxOp.FindStringSubmatch(l); m != nil {
			got = append(got, strings.Join(strings.Fields(m[1]), " "))
		}
	}
	src, err := os.ReadFile("amx_amd64.s")
	if err != nil {
		t.Fatal(err)
	}
	var want []string
	for _, l := range strings.Split(string(src), "\n") {
		if strings.Contains(l, "BYTE") {
			_, c, _ := strings.Cut(l, "// ")
			want = append(want, strings.TrimSpace(c))
		}
	}
	if !slices.Equal(got, want) {
		t.Fatalf("linked AMX instructions:\n%s\nwant (amx_amd64.s):\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
}
