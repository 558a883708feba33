//go:build race

package gemm

// raceOn: built with -race, whose sync.Pool drops a share of what is put
// back on purpose.
const raceOn = true
