package gemm

import (
	"math/rand/v2"
	"testing"
)

// PackLanes8 writes the pairs its definition names, for odd and even
// offsets, panel widths 8, 16 and 24, and several blocks.
func TestPackLanes8(t *testing.T) {
	if !lanesOK {
		t.Skip("no assembly for PackLanes8 on this CPU")
	}
	rng := rand.New(rand.NewPCG(5, 6))
	src := make([]uint16, 4096)
	for i := range src {
		src[i] = uint16(rng.Uint32())
	}
	for _, w := range []int{8, 16, 24} {
		for blocks := 1; blocks <= 3; blocks++ {
			var offs [8]int
			for i := range offs {
				offs[i] = rng.IntN(len(src) - 32*blocks)
			}
			dst := make([]uint32, 16*blocks*w)
			for i := range dst {
				dst[i] = 0xdeadbeef
			}
			if !PackLanes8(src, &offs, blocks, dst, w) {
				t.Fatal("PackLanes8 declined with its assembly present")
			}
			for q := 0; q < 16*blocks; q++ {
				for i := 0; i < w; i++ {
					got := dst[q*w+i]
					want := uint32(0xdeadbeef) // lanes past 8 untouched
					if i < 8 {
						want = uint32(src[offs[i]+2*q]) | uint32(src[offs[i]+2*q+1])<<16
					}
					if got != want {
						t.Fatalf("w %d, %d blocks: dst[%d*w+%d] = %#x, want %#x", w, blocks, q, i, got, want)
					}
				}
			}
		}
	}
}

// packBlockIlv writes each tile of a transposed A's block as its
// definition says (zeros past k and past the block's rows), leaves the
// dwords between tiles alone, and agrees with and without its assembly:
// whole and edge tiles, odd and even k, tile widths 24 and 12.
func TestPackBlockIlv(t *testing.T) {
	rng := rand.New(rand.NewPCG(9, 10))
	for _, mr := range []int{24, 12} {
		for _, mcur := range []int{8, 23, 24, 48, 143, 144} {
			for _, kcur := range []int{1, 2, 7, 64, 385} {
				for _, asm := range []bool{true, false} {
					if asm && ilv24NAsm == nil {
						continue
					}
					kp := ceilDiv(kcur, 2)
					ld := mcur + 5
					tstride := mr * (kp + 1)
					tiles := ceilDiv(mcur, mr)
					src := make([]uint16, 3+kcur*ld)
					for i := range src {
						src[i] = uint16(rng.Uint32())
					}
					dst := make([]uint32, tiles*tstride)
					for i := range dst {
						dst[i] = 0xdeadbeef
					}
					func() {
						if !asm {
							defer func(f func(*uint16, int, int, *uint32, int, int)) { ilv24NAsm = f }(ilv24NAsm)
							ilv24NAsm = nil
						}
						packBlockIlv(dst, mr, tstride, src, 3, ld, mcur, kcur)
					}()
					for tt := range tiles {
						for i := range tstride {
							q, l := i/mr, i%mr
							want := uint32(0xdeadbeef) // between tiles: untouched
							if q < kp {
								want = 0
								if r := mr*tt + l; r < mcur {
									want = uint32(src[3+2*q*ld+r])
									if 2*q+1 < kcur {
										want |= uint32(src[3+(2*q+1)*ld+r]) << 16
									}
								}
							}
							if got := dst[tt*tstride+i]; got != want {
								t.Fatalf("mr %d, %d rows, k %d, asm %v: tile %d dword %d (pair %d, lane %d) = %#x, want %#x", mr, mcur, kcur, asm, tt, i, q, l, got, want)
							}
						}
					}
				}
			}
		}
	}
}
