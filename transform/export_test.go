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
