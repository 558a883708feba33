//go:build !amd64 || purego

package gemm

var narrowAsm func(src *float32, blocks int, dst *uint16)

const narrowLanes = 1

var ilvAsm func(lo, hi *uint16, blocks int, dst *uint32, stride int)

var gatherAsm func(src *uint16, offs *int32, kp int, dst *uint32, w int)

var roundAsm func(src *float32, blocks int, dst *float32)

const roundLanes = 1
