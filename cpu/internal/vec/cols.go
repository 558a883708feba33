package vec

import "math"

// ColAdd adds x, widened to float64, to acc element by element
// (acc[j] += float64(x[j])) over a prefix of acc and x, and returns its
// length: a row's turn in column sums that add each column's rows in
// order. The sums are bit for bit the scalar loop's.
func ColAdd(acc []float64, x []float32) int {
	n := min(len(acc), len(x)) &^ 7
	if !enabled || n == 0 {
		return 0
	}
	colAddAVX2(&acc[0], &x[0], n)
	return n
}

// ColAddRows adds rows [0, rows) of x (row r at x[r*ld:]), widened to
// float64, to acc, each column's rows in order (acc[j] += float64(x[r*ld+j])
// for r = 0, 1, ...), over a prefix of acc whose length it returns (a
// multiple of 16); x must hold (rows-1)*ld plus that many elements. The
// sums are bit for bit the scalar loop's; sixteen columns' sums stay in
// registers down the rows, so acc is read and written once a call rather
// than once a row (ColAdd's way).
func ColAddRows(acc []float64, x []float32, ld, rows int) int {
	if !enabled || rows <= 0 {
		return 0
	}
	n := len(acc) &^ 15
	if n == 0 {
		return 0
	}
	if need := (rows-1)*ld + n; ld < n || len(x) < need {
		panic("vec: ColAddRows: x too short for its rows")
	}
	colAddRowsAVX2(&acc[0], &x[0], ld, rows, n)
	return n
}

// NormCols is a row's turn in a layer norm's weight and bias gradients:
// sw[j] += (float64(g[j])*(float64(x[j])-m))*rs and sb[j] +=
// float64(g[j]), each operation rounded (no fused multiply-add), over a
// prefix of the four slices whose length it returns.
func NormCols(sw, sb []float64, g, x []float32, m, rs float64) int {
	n := min(len(sw), len(sb), len(g), len(x)) &^ 3
	if !enabled || n == 0 {
		return 0
	}
	c := [2]float64{m, rs}
	normColsAVX2(&sw[0], &sb[0], &g[0], &x[0], n, &c)
	return n
}

// NormColsRows is NormCols for rows [0, rows) of g and x (row r at
// g[r*ld:] and x[r*ld:]), each with its own mean and scale (mr[2r] and
// mr[2r+1]), in row order, over a prefix of sw and sb whose length it
// returns (a multiple of 8): the sums bit for bit NormCols' row after
// row, with eight columns' sums in registers down the rows rather than
// loaded and stored a row at a time.
func NormColsRows(sw, sb []float64, g, x []float32, ld, rows int, mr []float64) int {
	if !enabled || rows <= 0 {
		return 0
	}
	n := min(len(sw), len(sb)) &^ 7
	if n == 0 {
		return 0
	}
	if need := (rows-1)*ld + n; ld < n || len(g) < need || len(x) < need || len(mr) < 2*rows {
		panic("vec: NormColsRows: operands too short for their rows")
	}
	normColsRowsAVX2(&sw[0], &sb[0], &g[0], &x[0], ld, rows, n, &mr[0])
	return n
}

// Max returns the largest element of x, NaNs skipped (-Inf if none is a
// number), and len(x); with no assembly, -Inf and 0 (the caller does it
// all). The tail past the last whole vector runs as a vector padded with
// -Inf, and the lanes are reduced without branches (a row of scores per
// call made both the costly part: gpt's attention rows are 1 to 256 long).
// Which of +0 and -0 wins a tie is not specified.
func Max(x []float32) (float32, int) {
	inf := float32(math.Inf(-1))
	if !enabled || len(x) == 0 {
		return inf, 0
	}
	out := [8]float32{inf, inf, inf, inf, inf, inf, inf, inf}
	n := len(x) &^ 7
	if n < len(x) {
		pad := out
		copy(pad[:], x[n:])
		maxAVX2(&pad[0], 8, &out)
	}
	if n > 0 {
		maxAVX2(&x[0], n, &out)
	}
	m := out[0]
	for _, v := range out[1:] {
		m = max(m, v) // no NaNs: the lanes skip them
	}
	return m, len(x)
}
