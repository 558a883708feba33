package optim

import (
	"errors"
	"fmt"
	"math"
	"slices"
	"testing"
)

// clipCases mirrors run_clip in scripts/reference/optim_ref.py.
var clipCases = []struct {
	name     string
	maxNorm  float64
	normType float64
	noGrad   []string
}{
	{"l2_clipped", 1.0, 2, nil},
	{"l2_unclipped", 1000.0, 2, nil},
	{"l2_skip_none", 0.5, 2, []string{"p1"}},
	{"l2_tiny", 1e-3, 2, nil},
	{"inf_clipped", 0.25, math.Inf(1), nil},
	{"inf_unclipped", 100.0, math.Inf(1), []string{"p0"}},
}

func TestClipGradNormMatchesPyTorch(t *testing.T) {
	ref := loadRef(t, "clip")
	if len(ref.configs) != len(clipCases) {
		t.Errorf("reference has %d cases, the test table %d", len(ref.configs), len(clipCases))
	}
	var total diff
	for _, tc := range clipCases {
		t.Run(tc.name, func(t *testing.T) {
			var pc struct {
				MaxNorm  float64  `json:"max_norm"`
				NormType any      `json:"norm_type"`
				NoGrad   []string `json:"no_grad"`
			}
			ref.config(t, tc.name, &pc)
			nt := pc.NormType
			if nt == "inf" {
				nt = math.Inf(1)
			}
			if pc.MaxNorm != tc.maxNorm || nt != tc.normType || !slices.Equal(pc.NoGrad, tc.noGrad) && len(pc.NoGrad)+len(tc.noGrad) > 0 {
				t.Fatalf("test table disagrees with the reference script's configuration %s", ref.configs[tc.name])
			}
			var params []Param
			for _, n := range refParams {
				// A parameter's Value is not read by clipping; leave it nil.
				params = append(params, Param{Name: n, Grad: ref.f32(t, tc.name+"/grad/"+n)})
				if (params[len(params)-1].Grad == nil) != slices.Contains(tc.noGrad, n) {
					t.Fatalf("%s: gradient presence of %s disagrees with the table", tc.name, n)
				}
			}
			norm, err := ClipGradNorm(params, tc.maxNorm, tc.normType)
			if err != nil {
				t.Fatal(err)
			}
			var d diff
			if err := d.add([]float32{float32(norm)}, ref.must(t, tc.name+"/total_norm")); err != nil {
				t.Fatal(err)
			}
			if d.maxRel > relTol {
				t.Errorf("total norm %v: %v", norm, d)
			}
			for _, p := range params {
				if p.Grad == nil {
					continue
				}
				var dg diff
				if err := dg.add(p.Grad, ref.must(t, tc.name+"/clipped/"+p.Name)); err != nil {
					t.Fatal(err)
				}
				if dg.maxRel > relTol {
					t.Errorf("clipped gradient of %s: %v", p.Name, dg)
				}
				d.n, d.mismatch, d.maxRel = d.n+dg.n, d.mismatch+dg.mismatch, max(d.maxRel, dg.maxRel)
			}
			t.Logf("norm %.9g: %v", norm, d)
			total.n, total.mismatch, total.maxRel = total.n+d.n, total.mismatch+d.mismatch, max(total.maxRel, d.maxRel)
		})
	}
	t.Logf("all clip cases: %v", total)
}

func TestClipGradNormEdges(t *testing.T) {
	nan := float32(math.NaN())
	inf := float32(math.Inf(1))
	tests := []struct {
		name     string
		grads    [][]float32
		maxNorm  float64
		normType float64
		want     float64 // returned norm; NaN compares by IsNaN
		wantErr  error   // matched with errors.Is; nil: no error
		after    [][]float32
	}{
		{"no gradients", [][]float32{nil}, 1, 2, 0, nil, [][]float32{nil}},
		{"3-4-5", [][]float32{{3}, {4}}, 10, 2, 5, nil, [][]float32{{3}, {4}}},
		{"l1", [][]float32{{3, -1}, {-4}}, 4, 1, 8, nil, [][]float32{{1.5, -0.5}, {-2}}},
		{"inf", [][]float32{{3, -7}, {4}}, 3.5, math.Inf(1), 7, nil, [][]float32{{1.5, -3.5}, {2}}},
		{"nan", [][]float32{{3, nan}}, 1, 2, math.NaN(), ErrNonfiniteNorm, [][]float32{{3, nan}}},
		{"inf gradient", [][]float32{{inf}, {1}}, 1, 2, math.Inf(1), ErrNonfiniteNorm, [][]float32{{inf}, {1}}},
		{"nan under inf norm", [][]float32{{1}, {nan, 2}}, 1, math.Inf(1), math.NaN(), ErrNonfiniteNorm, [][]float32{{1}, {nan, 2}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			params := make([]Param, len(tt.grads))
			for i, g := range tt.grads {
				params[i] = Param{Name: fmt.Sprint(i), Grad: slices.Clone(g)}
			}
			got, err := ClipGradNorm(params, tt.maxNorm, tt.normType)
			if !errors.Is(err, tt.wantErr) || (err == nil) != (tt.wantErr == nil) {
				t.Fatalf("err = %v, want %v", err, tt.wantErr)
			}
			if got != tt.want && !(math.IsNaN(got) && math.IsNaN(tt.want)) {
				t.Errorf("norm = %v, want %v", got, tt.want)
			}
			for i, p := range params {
				for j := range p.Grad {
					w := tt.after[i][j]
					// 1e-6 in the clip coefficient moves the result slightly.
					if g := p.Grad[j]; !(math.Abs(float64(g-w)) <= 1e-5*math.Abs(float64(w))) && !(g != g && w != w) && g != w {
						t.Errorf("grad[%d][%d] = %v, want %v", i, j, g, w)
					}
				}
			}
		})
	}
}

func TestClipGradNormInvalid(t *testing.T) {
	p := []Param{{Name: "w", Grad: []float32{1}}}
	for _, c := range []struct{ maxNorm, normType float64 }{{-1, 2}, {math.NaN(), 2}, {1, 0}, {1, -2}, {1, math.Inf(-1)}, {1, math.NaN()}} {
		if _, err := ClipGradNorm(p, c.maxNorm, c.normType); err == nil {
			t.Errorf("ClipGradNorm(max_norm=%v, norm_type=%v) succeeded", c.maxNorm, c.normType)
		}
	}
	if p[0].Grad[0] != 1 {
		t.Errorf("rejected call changed the gradient to %v", p[0].Grad[0])
	}
}
