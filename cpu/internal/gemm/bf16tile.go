package gemm

// BF16Tile is the native bf16 micro-kernel, for callers that pack their
// own panels in its layout (the convolutions, which pack straight from
// their images): pairs of k, an A panel holding per pair MR dwords (one
// per row), a B panel NR (one per column), each dword the bf16 of even k
// low and of odd k high, zero past k.
type BF16Tile struct{ kern *bf16Kernel }

// NativeBF16Tile returns the native bf16 micro-kernel, if it is on: the
// VDPBF16PS one even where products run on AMX (its callers' tests hold
// it to VDPBF16PS's arithmetic, RefDotBF16).
func NativeBF16Tile() (BF16Tile, bool) {
	k := bf16TileKern()
	return BF16Tile{k}, k != nil
}

// bf16TileKern is the VDPBF16PS kernel where native bf16 is on: bf16Kern,
// or where that is the AMX kernel the first VDPBF16PS one.
func bf16TileKern() *bf16Kernel {
	if bf16Kern == nil || !bf16Kern.amx {
		return bf16Kern
	}
	for _, k := range bf16Kernels() {
		if !k.amx {
			return k
		}
	}
	return nil
}

// MR is the number of rows of a tile (of an A panel's lanes).
func (t BF16Tile) MR() int { return t.kern.mr }

// NR is the number of columns of a tile (of a B panel's lanes).
func (t BF16Tile) NR() int { return t.kern.nr }

// Run adds, for each of kp pairs in order, both products of each A and B
// dword to a float32 sum from +0 (VDPBF16PS) and stores the MR×NR tile at
// c (row stride ldc): c = sum with set, else c = c + sum rounded once.
func (t BF16Tile) Run(kp int, a, b []uint32, c []float32, ldc int, set bool) {
	t.kern.fn(kp, a, b, c, ldc, 1, 1, set)
}

// PackPairsRows packs lanes rows of k (row r from src[off+r*ld], kcur
// values) into a w-lane panel: dst[q*w+r] = value 2q | value 2q+1 << 16,
// zero past kcur and in lanes [lanes, w).
func PackPairsRows(dst []uint32, w int, src []uint16, off, ld, lanes, kcur int) {
	packPairsAdj(dst, w, src, off, ld, lanes, kcur)
}
