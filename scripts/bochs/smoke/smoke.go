//go:build bochs && amd64

// Package smoke proves that AVX-512 instructions execute: under
// scripts/bochs/run.sh (Bochs as an AVX-512 CPU) its test passes; on a CPU
// without AVX-512 it fails, reporting the missing feature (or, with
// HEADROOM_SMOKE_FORCE=1, dies of SIGILL). Every file carries the build tag
// bochs, so `go test ./...` skips it; build it with
//
//	CGO_ENABLED=0 go test -c -tags bochs -o /tmp/smoke.test ./scripts/bochs/smoke
package smoke

// cpuidRaw executes CPUID with the given leaf and subleaf.
func cpuidRaw(leaf, sub uint32) (eax, ebx, ecx, edx uint32)

// xgetbvRaw reads XCR0. Only call it when CPUID.1:ECX.OSXSAVE is set.
func xgetbvRaw() (eax, edx uint32)

// fmaZ computes, with 512-bit EVEX instructions,
//
//	out[i] = a[i] + b[i] + a[i]*s   (VADDPS, then VFMADD231PS with {1to16})
//
// stores it with VMOVUPS, and stores it again into masked through opmask
// K1 = mask, so that masked[i] is written only where bit i of mask is set.
// It uses Z16..Z31, which only EVEX can encode.
func fmaZ(a, b *[16]float32, s *float32, out, masked *[16]float32, mask uint16)

// addVLBW adds the 8 floats of x and y with a 256-bit EVEX VADDPS (AVX512VL)
// under opmask K2 = mask with zeroing, and adds the 64 bytes of p and q with
// VPADDB on ZMM (AVX512BW).
func addVLBW(x, y, outY *[8]float32, mask uint8, p, q, outB *[64]byte)
