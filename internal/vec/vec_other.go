//go:build !amd64 || purego

package vec

const enabled = false

func geluAVX2(x, y *float32, n int)             { panic("vec: no assembly") }
func geluBackwardAVX2(dy, x, y *float32, n int) { panic("vec: no assembly") }

func adamAVX2(v, grad, m, s *float32, n int, c *AdamConsts) { panic("vec: no assembly") }

func expAffineAVX2(x, y *float32, n int, ab *[2]float32) { panic("vec: no assembly") }
