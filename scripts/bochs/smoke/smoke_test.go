//go:build bochs && amd64

package smoke

import (
	"fmt"
	"os"
	"testing"

	"github.com/headroom-ml/headroom/internal/cpuid"
)

type flags struct {
	xcr0                   uint32
	osxsave                bool
	f, dq, cd, bw, vl      bool // CPUID.7.0:EBX
	vnni, vbmi, bf16, fp16 bool
}

func readFlags() flags {
	var fl flags
	maxLeaf, _, _, _ := cpuidRaw(0, 0)
	_, _, ecx1, _ := cpuidRaw(1, 0)
	fl.osxsave = ecx1&(1<<27) != 0
	if fl.osxsave {
		fl.xcr0, _ = xgetbvRaw()
	}
	if maxLeaf >= 7 {
		_, ebx, ecx, edx := cpuidRaw(7, 0)
		fl.f = ebx&(1<<16) != 0
		fl.dq = ebx&(1<<17) != 0
		fl.cd = ebx&(1<<28) != 0
		fl.bw = ebx&(1<<30) != 0
		fl.vl = ebx&(1<<31) != 0
		fl.vbmi = ecx&(1<<1) != 0
		fl.vnni = ecx&(1<<11) != 0
		fl.fp16 = edx&(1<<23) != 0
		eax1, _, _, _ := cpuidRaw(7, 1)
		fl.bf16 = eax1&(1<<5) != 0
	}
	return fl
}

func TestAVX512(t *testing.T) {
	fl := readFlags()
	osZMM := fl.osxsave && fl.xcr0&0xe6 == 0xe6
	fmt.Printf("cpuid.X86: %+v\n", cpuid.X86)
	fmt.Printf("CPUID: AVX512F=%v AVX512VL=%v AVX512BW=%v AVX512DQ=%v AVX512CD=%v VNNI=%v VBMI=%v BF16=%v FP16=%v\n",
		fl.f, fl.vl, fl.bw, fl.dq, fl.cd, fl.vnni, fl.vbmi, fl.bf16, fl.fp16)
	fmt.Printf("XCR0=%#x (OS saves opmask+ZMM: %v)\n", fl.xcr0, osZMM)
	if cpuid.X86.AVX512F != (fl.f && osZMM) {
		t.Errorf("cpuid.X86.AVX512F = %v, but CPUID/XCR0 say %v", cpuid.X86.AVX512F, fl.f && osZMM)
	}
	if !cpuid.X86.AVX512F && os.Getenv("HEADROOM_SMOKE_FORCE") != "1" {
		t.Fatal("no AVX-512F on this CPU/OS: run this under scripts/bochs/run.sh " +
			"(HEADROOM_SMOKE_FORCE=1 executes the instructions anyway, expecting SIGILL)")
	}

	var a, b, out, masked [16]float32
	s := float32(0.5)
	for i := range a {
		a[i] = float32(i + 1)
		b[i] = float32(100 * i)
		masked[i] = -1
	}
	const mask = 0xa5c3
	fmaZ(&a, &b, &s, &out, &masked, mask)
	for i := range a {
		want := a[i] + b[i] + a[i]*s
		if out[i] != want {
			t.Errorf("out[%d] = %v, want %v", i, out[i], want)
		}
		wantM := float32(-1)
		if mask>>i&1 != 0 {
			wantM = want
		}
		if masked[i] != wantM {
			t.Errorf("masked[%d] = %v, want %v (mask %#x)", i, masked[i], wantM, mask)
		}
	}
	fmt.Printf("ZMM VADDPS+VFMADD231PS{1to16}: %v\nK1-masked store (mask %#04x): %v\n", out, mask, masked)

	if !fl.vl || !fl.bw {
		t.Logf("AVX512VL/BW missing: skipping the VL/BW check")
		return
	}
	var x, y, outY [8]float32
	var p, q, outB [64]byte
	for i := range x {
		x[i], y[i], outY[i] = float32(i), 0.25, -7
	}
	for i := range p {
		p[i], q[i] = byte(i), byte(200)
	}
	const ymask = 0x5a
	addVLBW(&x, &y, &outY, ymask, &p, &q, &outB)
	for i := range x {
		want := float32(0)
		if ymask>>i&1 != 0 {
			want = x[i] + y[i]
		}
		if outY[i] != want {
			t.Errorf("outY[%d] = %v, want %v", i, outY[i], want)
		}
	}
	for i := range p {
		if want := p[i] + q[i]; outB[i] != want {
			t.Errorf("outB[%d] = %d, want %d", i, outB[i], want)
		}
	}
	fmt.Printf("YMM VADDPS.Z under K2 (mask %#02x): %v\nZMM VPADDB: %v\n", ymask, outY, outB[:8])
}
