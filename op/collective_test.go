package op_test

import (
	"context"
	"fmt"
	"math"
	"math/rand"
	"strings"
	"sync"
	"testing"

	"github.com/headroom-ml/headroom/autodiff"
	"github.com/headroom-ml/headroom/comm"
	"github.com/headroom-ml/headroom/device"
	"github.com/headroom-ml/headroom/exec"
	"github.com/headroom-ml/headroom/op"
	"github.com/headroom-ml/headroom/prim"
	"github.com/headroom-ml/headroom/tensor"
	"github.com/headroom-ml/headroom/trace"
)

// runCollective traces y = f(x) and the gradient of sum(y*seed) on one
// rank, runs it on the cpu with the rank's communicator and returns y and
// the gradient as float64.
func runCollective(ctx context.Context, c comm.Comm, f func(x *trace.Tensor) *trace.Tensor, x, seed *tensor.Tensor) (y, gx []float64, err error) {
	g := trace.New()
	err = trace.Capture(func() {
		xi := g.Input("x", x.DType, x.Shape)
		out := f(xi)
		g.Output("y", out)
		s := g.Input("seed", seed.DType, out.Shape())
		gs, err := autodiff.Backward(op.Sum(op.Mul(out, s), false), []*trace.Tensor{xi})
		if err != nil {
			panic(err)
		}
		g.Output("g", gs[0])
	})
	if err != nil {
		return nil, nil, err
	}
	p, err := exec.Compile(g, device.CPU())
	if err != nil {
		return nil, nil, err
	}
	arena := exec.NewArena(p.Device)
	defer arena.Release()
	res, err := p.Run(ctx, arena, exec.StateMap{}, map[string]*tensor.Tensor{"x": x, "seed": seed}, &exec.Options{Comm: c})
	if err != nil {
		return nil, nil, err
	}
	return res["y"].Float64s(), res["g"].Float64s(), nil
}

// TestCollectives checks each collective's values and gradients on 1-3
// ranks of comm.Local against the same sums written out, in float32 and
// float64, including the flat (ZeRO) gathers and scatters of a tensor
// whose size the ranks do not divide.
func TestCollectives(t *testing.T) {
	type rankData struct{ x, s []float64 }
	cases := []struct {
		name  string
		in    func(n int) tensor.Shape // each rank's input
		out   func(n int) tensor.Shape
		f     func(x *trace.Tensor, n int) *trace.Tensor
		wantY func(d []rankData, r, n int) []float64
		wantG func(d []rankData, r, n int) []float64
	}{
		{
			name: "all_reduce", in: func(int) tensor.Shape { return tensor.Shape{2, 3} }, out: func(int) tensor.Shape { return tensor.Shape{2, 3} },
			f:     func(x *trace.Tensor, n int) *trace.Tensor { return op.AllReduce(x, n) },
			wantY: func(d []rankData, r, n int) []float64 { return sumOver(d, func(q rankData) []float64 { return q.x }) },
			wantG: func(d []rankData, r, n int) []float64 { return d[r].s }, // identity: Megatron's g
		},
		{
			name: "copy_to_ranks", in: func(int) tensor.Shape { return tensor.Shape{4} }, out: func(int) tensor.Shape { return tensor.Shape{4} },
			f:     func(x *trace.Tensor, n int) *trace.Tensor { return op.CopyToRanks(x, n) },
			wantY: func(d []rankData, r, n int) []float64 { return d[r].x },
			wantG: func(d []rankData, r, n int) []float64 { return sumOver(d, func(q rankData) []float64 { return q.s }) },
		},
		{
			name: "all_gather", in: func(int) tensor.Shape { return tensor.Shape{2, 3} }, out: func(n int) tensor.Shape { return tensor.Shape{2 * n, 3} },
			f: func(x *trace.Tensor, n int) *trace.Tensor { return op.AllGather(x, n) },
			wantY: func(d []rankData, r, n int) []float64 {
				var y []float64
				for _, q := range d {
					y = append(y, q.x...)
				}
				return y
			},
			wantG: func(d []rankData, r, n int) []float64 {
				return sumOver(d, func(q rankData) []float64 { return q.s[r*6 : (r+1)*6] })
			},
		},
		{
			name: "reduce_scatter", in: func(n int) tensor.Shape { return tensor.Shape{2 * n, 3} }, out: func(int) tensor.Shape { return tensor.Shape{2, 3} },
			f: func(x *trace.Tensor, n int) *trace.Tensor { return op.ReduceScatter(x, n) },
			wantY: func(d []rankData, r, n int) []float64 {
				return sumOver(d, func(q rankData) []float64 { return q.x[r*6 : (r+1)*6] })
			},
			wantG: func(d []rankData, r, n int) []float64 {
				var g []float64
				for _, q := range d {
					g = append(g, q.s...)
				}
				return g
			},
		},
		{
			// A flat shard of a [5] tensor: 3 values a rank on 2 ranks, 2 on 3,
			// the padding dropped.
			name: "all_gather_flat", in: func(n int) tensor.Shape { return tensor.Shape{prim.ShardLen(5, n)} }, out: func(int) tensor.Shape { return tensor.Shape{5} },
			f: func(x *trace.Tensor, n int) *trace.Tensor {
				return prim.Apply1(&prim.AllGather{Ranks: n, Shape: tensor.Shape{5}}, x)
			},
			wantY: func(d []rankData, r, n int) []float64 {
				var y []float64
				for _, q := range d {
					y = append(y, q.x...)
				}
				return y[:5]
			},
			wantG: func(d []rankData, r, n int) []float64 {
				c := prim.ShardLen(5, n)
				return sumOver(d, func(q rankData) []float64 { return padded(q.s, n*c)[r*c : (r+1)*c] })
			},
		},
		{
			name: "reduce_scatter_flat", in: func(int) tensor.Shape { return tensor.Shape{5} }, out: func(n int) tensor.Shape { return tensor.Shape{prim.ShardLen(5, n)} },
			f: func(x *trace.Tensor, n int) *trace.Tensor {
				return prim.Apply1(&prim.ReduceScatter{Ranks: n, Flat: true}, x)
			},
			wantY: func(d []rankData, r, n int) []float64 {
				c := prim.ShardLen(5, n)
				return sumOver(d, func(q rankData) []float64 { return padded(q.x, n*c)[r*c : (r+1)*c] })
			},
			wantG: func(d []rankData, r, n int) []float64 {
				var g []float64
				for _, q := range d {
					g = append(g, q.s...)
				}
				return g[:5]
			},
		},
	}
	for _, tc := range cases {
		for _, n := range []int{1, 2, 3} {
			for _, dt := range []tensor.DType{tensor.Float32, tensor.Float64} {
				t.Run(fmt.Sprintf("%s/%d/%v", tc.name, n, dt), func(t *testing.T) {
					rng := rand.New(rand.NewSource(int64(n)))
					d := make([]rankData, n)
					xs, ss := make([]*tensor.Tensor, n), make([]*tensor.Tensor, n)
					for r := range d {
						xs[r], d[r].x = randomOf(rng, dt, tc.in(n))
						ss[r], d[r].s = randomOf(rng, dt, tc.out(n))
					}
					ys, gs := make([][]float64, n), make([][]float64, n)
					var mu sync.Mutex
					err := comm.Run(context.Background(), n, func(ctx context.Context, c comm.Comm) error {
						y, g, err := runCollective(ctx, c, func(x *trace.Tensor) *trace.Tensor { return tc.f(x, n) }, xs[c.Rank()], ss[c.Rank()])
						mu.Lock()
						ys[c.Rank()], gs[c.Rank()] = y, g
						mu.Unlock()
						return err
					})
					if err != nil {
						t.Fatal(err)
					}
					tol := 1e-12
					if dt == tensor.Float32 {
						tol = 1e-5
					}
					for r := range n {
						closeAll(t, fmt.Sprintf("rank %d: y", r), ys[r], tc.wantY(d, r, n), tol)
						closeAll(t, fmt.Sprintf("rank %d: gradient", r), gs[r], tc.wantG(d, r, n), tol)
					}
				})
			}
		}
	}
}

// TestCollectiveNeedsCommunicator: a step with a collective and no
// communicator, or one of another size, stops at the node with a message
// saying what to bind; a graph traced for a group refuses other dtypes.
func TestCollectiveNeedsCommunicator(t *testing.T) {
	x := tensor.FromFloat64(tensor.Shape{2}, []float64{1, 2}).Convert(tensor.Float32)
	s := tensor.FromFloat64(tensor.Shape{2}, []float64{1, 1}).Convert(tensor.Float32)
	_, _, err := runCollective(context.Background(), nil, func(x *trace.Tensor) *trace.Tensor { return op.AllReduce(x, 2) }, x, s)
	if err == nil || !strings.Contains(err.Error(), "exec.Options.Comm") {
		t.Errorf("without a communicator: err = %v, want it to name exec.Options.Comm", err)
	}
	err = comm.Run(context.Background(), 3, func(ctx context.Context, c comm.Comm) error {
		_, _, err := runCollective(ctx, c, func(x *trace.Tensor) *trace.Tensor { return op.AllReduce(x, 2) }, x, s)
		return err
	})
	if err == nil || !strings.Contains(err.Error(), "traced for 2 ranks, the communicator has 3") {
		t.Errorf("3 ranks for a graph of 2: err = %v", err)
	}
	i := tensor.FromInt64(tensor.Shape{2}, []int64{1, 2})
	g := trace.New()
	err = trace.Capture(func() { op.AllGather(g.Input("i", i.DType, i.Shape), 2) })
	if err == nil || !strings.Contains(err.Error(), "float32 or float64") {
		t.Errorf("int64 all-gather: err = %v", err)
	}
}

func randomOf(r *rand.Rand, dt tensor.DType, s tensor.Shape) (*tensor.Tensor, []float64) {
	v := make([]float64, s.NumElements())
	for i := range v {
		v[i] = r.Float64()*2 - 1
	}
	t := tensor.FromFloat64(s, v).Convert(dt)
	return t, t.Float64s()
}

func sumOver[T any](d []T, f func(T) []float64) []float64 {
	var s []float64
	for _, q := range d {
		v := f(q)
		if s == nil {
			s = make([]float64, len(v))
		}
		for i := range v {
			s[i] += v[i]
		}
	}
	return s
}

func padded(v []float64, n int) []float64 {
	out := make([]float64, n)
	copy(out, v)
	return out
}

func closeAll(t *testing.T, what string, got, want []float64, tol float64) {
	t.Helper()
	if len(got) != len(want) {
		t.Fatalf("%s: %d values, want %d", what, len(got), len(want))
	}
	for i := range got {
		if math.Abs(got[i]-want[i]) > tol*(1+math.Abs(want[i])) {
			t.Fatalf("%s[%d] = %v, want %v", what, i, got[i], want[i])
		}
	}
}
