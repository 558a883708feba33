package transform

// SetReadLow turns ApplyPrecision's ReadLow pass on or off and returns the
// previous setting.
func SetReadLow(on bool) bool {
	old := readLow
	readLow = on
	return old
}

// SetSliceCat turns the SliceFromCat pass on or off and returns the
// previous setting.
func SetSliceCat(on bool) bool {
	old := sliceCat
	sliceCat = on
	return old
}

// SetFoldOnly makes ReadLow stop after folding casts (no matmul reads a
// 16-bit operand in place) and returns the previous setting.
func SetFoldOnly(on bool) bool {
	old := foldOnly
	foldOnly = on
	return old
}

// SetCatLow turns foldCasts' 16-bit concatenations (widenAfterCat) on or
// off and returns the previous setting.
func SetCatLow(on bool) bool {
	old := catLow
	catLow = on
	return old
}

// SetSplitAdd turns Fuse's merging of splits and gradient sums
// (splitAdds) on or off and returns the previous setting.
func SetSplitAdd(on bool) bool {
	old := splitAdd
	splitAdd = on
	return old
}

// SetCatWiden turns widenAfterCat's prim.CatWiden on or off and returns
// the previous setting.
func SetCatWiden(on bool) bool {
	old := catWiden
	catWiden = on
	return old
}

// SetConvReadsInputLow turns forward convolutions reading their 16-bit
// inputs in place (convReadsLow) on or off and returns the previous
// setting.
func SetConvReadsInputLow(on bool) bool {
	old := convReadsInputLow
	convReadsInputLow = on
	return old
}

// SetSplitLow turns bf16-true's readLowShared on or off and returns the
// previous setting.
func SetSplitLow(on bool) bool {
	old := splitLow
	splitLow = on
	return old
}

// SetAttnLayout turns the attention layout pass on or off and returns the
// previous setting.
func SetAttnLayout(on bool) bool {
	old := attnLayout
	attnLayout = on
	return old
}

// SetNormReadsLow turns batch norms reading their bfloat16 input in place
// (normReadsLow) on or off and returns the previous setting.
func SetNormReadsLow(on bool) bool {
	old := normReadsInputLow
	normReadsInputLow = on
	return old
}

// SetConvPointwiseLow sets which convolutions read bfloat16 operands
// (convLow): "auto" (where the backend multiplies them natively), "off",
// "on" (pointwise ones, whatever the kernel) or "all" (every one); it
// returns the previous setting.
func SetConvPointwiseLow(mode string) string {
	names := map[int]string{pwAuto: "auto", pwOff: "off", pwOn: "on", pwAll: "all"}
	old := names[convPointwiseLow]
	for k, v := range names {
		if v == mode {
			convPointwiseLow = k
		}
	}
	return old
}
