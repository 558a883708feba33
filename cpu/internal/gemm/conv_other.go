//go:build !amd64 || purego

package gemm

// convTile is nil: there is no portable direct-convolution kernel (callers
// check ConvTileOK and use the implicit GEMM instead).
var convTile, convTile4 func(k int, a, b *float32, offs *int32, c *float32, ldc int)

var convWgrad, convWgrad8 func(gy *float32, ldk int, x *float32, dw, wp, ow, oh int, out *float32)
