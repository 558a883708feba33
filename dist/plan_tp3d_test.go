package dist_test

import (
	"context"
	"errors"
	"strconv"
	"strings"
	"testing"

	"github.com/headroom-ml/headroom/device"
	"github.com/headroom-ml/headroom/dist"
	"github.com/headroom-ml/headroom/nn"
	"github.com/headroom-ml/headroom/pipeline"
	"github.com/headroom-ml/headroom/train"
	"github.com/headroom-ml/headroom/zoo"
)

// stagePieceBytes is, by construction, what tensor rank 0 of stage s
// holds of cfg's GPT split across T ranks and cut into P even stages:
// its blocks' pieces (zoo.NewTPGPT's shapes) and the replicated
// embeddings (first stage) or final layer norm and tied LM head (last),
// each parameter in the allocator's blocks.
func stagePieceBytes(t *testing.T, cfg zoo.GPTConfig, P, T, s int) int64 {
	t.Helper()
	st := nn.NewStore()
	if _, err := zoo.NewTPGPT(st.Root(), cfg, 0, T); err != nil {
		t.Fatal(err)
	}
	lo, hi := s*cfg.NLayer/P, (s+1)*cfg.NLayer/P
	var n int64
	for _, p := range st.Params() {
		hold := false
		switch {
		case strings.HasPrefix(p.Name, "transformer.h."):
			k, _ := strconv.Atoi(strings.Split(p.Name, ".")[2])
			hold = k >= lo && k < hi
		case strings.HasPrefix(p.Name, "transformer.wte."):
			hold = s == 0 || s == P-1
		case strings.HasPrefix(p.Name, "transformer.wpe."):
			hold = s == 0
		case strings.HasPrefix(p.Name, "transformer.ln_f."):
			hold = s == P-1
		}
		if hold {
			n += device.RoundSize(p.Numel() * 4)
		}
	}
	return n
}

// A GPT of 8 blocks and 8 heads on up to 1024 ranks: every rank's
// parameters and gradients are its stage's blocks' pieces plus the
// replicated parameters it holds, known by construction; the ranks of a
// stage plan alike (one plan per stage and share), hold less than the
// whole stage, and the tensor group's all-reduces count in the bytes each
// rank sends.
func TestPlanTP3DByConstruction(t *testing.T) {
	cfg := zoo.GPTConfig{NLayer: 8, NHead: 8, NEmbd: 64, BlockSize: 16, VocabSize: 96, Bias: true}
	for _, tc := range []struct{ D, P, T, batch int }{
		{1, 2, 2, 4},
		{1, 4, 8, 8},
		{2, 2, 4, 8},
		{16, 8, 8, 64},
	} {
		N := tc.D * tc.P * tc.T
		job := tp3dJob(cfg, tc.batch, 2, pipeline.OneFOneB, pipeAdam)
		l := dist.Layout{Ranks: N, Pipeline: tc.P, Tensor: tc.T}
		groups, err := dist.PlanRanks(context.Background(), job, l)
		if err != nil {
			t.Fatalf("%v: %v", l, err)
		}
		if len(groups) != tc.P {
			t.Errorf("%v: %d plans, want one per stage (%d)", l, len(groups), tc.P)
		}
		// The same stages without tensor parallelism.
		whole, err := dist.PlanRanks(context.Background(), job, dist.Layout{Ranks: tc.D * tc.P, Pipeline: tc.P})
		if err != nil {
			t.Fatal(err)
		}
		for _, g := range groups {
			s := (g.Rank / tc.T) % tc.P
			want := stagePieceBytes(t, cfg, tc.P, tc.T, s)
			if g.Memory.Parameters != want || g.Memory.Gradients != want {
				t.Errorf("%v, rank %d (stage %d): parameters %d, gradients %d; its pieces hold %d", l, g.Rank, s, g.Memory.Parameters, g.Memory.Gradients, want)
			}
			for r := range N {
				if g.Has(r) != ((r/tc.T)%tc.P == s) {
					t.Errorf("%v: rank %d in the plan of stage %d: %v", l, r, s, g.Ranks)
				}
			}
			w := whole[groupOf(whole, s*tc.D)]
			if g.Memory.Parameters >= w.Memory.Parameters || g.Memory.Total() >= w.Memory.Total() {
				t.Errorf("%v, stage %d: %d parameters, peak %d; the whole stage's %d, %d", l, s, g.Memory.Parameters, g.Memory.Total(), w.Memory.Parameters, w.Memory.Total())
			}
			// One replica: the whole stage sends only its activations and
			// their gradients, as the pieces do, besides their all-reduces.
			if tc.D == 1 && g.Moved <= w.Moved {
				t.Errorf("%v, stage %d: sends %d per step, no more than the whole stage's %d (the tensor group's all-reduces)", l, s, g.Moved, w.Moved)
			}
		}
		t.Logf("%v: %v", l, groups)
	}
}

// groupOf is the index of the group holding rank r.
func groupOf(groups []dist.RankPlan, r int) int {
	for i, g := range groups {
		if g.Has(r) {
			return i
		}
	}
	return -1
}

func TestPlanTP3DRefusals(t *testing.T) {
	cfg := zoo.GPTConfig{NLayer: 2, NHead: 6, NEmbd: 24, BlockSize: 8, VocabSize: 40, Bias: true}
	job := tp3dJob(cfg, 8, 2, pipeline.GPipe, pipeAdam)
	for _, tc := range []struct {
		l    dist.Layout
		want error
	}{
		{dist.Layout{Ranks: 6, Pipeline: 2, Tensor: 2}, dist.ErrConfig}, // not a multiple of 4
		{dist.Layout{Ranks: 8, Pipeline: 2, Tensor: 4}, dist.ErrConfig}, // 6 heads on 4 ranks
		{dist.Layout{Ranks: 6, Pipeline: 3, Tensor: 2}, dist.ErrConfig}, // 2 blocks, 3 stages
		{dist.Layout{Ranks: 8, Pipeline: 2, Tensor: 2, Zero: 2}, dist.ErrNotAvailable},
		{dist.Layout{Ranks: 4, Pipeline: 2, Tensor: 2, Zero: 1}, dist.ErrConfig}, // one replica
		{dist.Layout{Ranks: 8, Pipeline: 2, Tensor: 2, Overlap: true}, dist.ErrNotAvailable},
	} {
		_, err := dist.PlanRanks(context.Background(), job, tc.l)
		if !errors.Is(err, tc.want) {
			t.Errorf("%v: %v, want %v", tc.l, err, tc.want)
		}
	}
	// A model that is not a GPT.
	j := tp3dJob(cfg, 8, 2, pipeline.GPipe, pipeAdam)
	j.Build = func(s *nn.Store) (train.Model, train.LossFunc) {
		m := pipeline.Sequential(s, pipeLayers())
		return m, zoo.CrossEntropyLoss
	}
	if _, err := dist.PlanRanks(context.Background(), j, dist.Layout{Ranks: 4, Pipeline: 2, Tensor: 2}); !errors.Is(err, dist.ErrConfig) {
		t.Errorf("a non-GPT model: %v", err)
	}
}

// A stage's tensor groups in the replicas are equal spans at a stride.
func TestRanksStringStridedSpans(t *testing.T) {
	for _, tc := range []struct {
		spans []dist.Span
		want  string
	}{
		{[]dist.Span{{0, 3}, {16, 19}, {32, 35}, {48, 51}, {64, 67}}, "0–3, 16–19, …, 64–67"},
		{[]dist.Span{{0, 3}, {16, 19}, {32, 35}, {48, 51}}, "0–3, 16–19, 32–35, 48–51"},
		{[]dist.Span{{0, 3}, {16, 19}, {32, 35}, {48, 51}, {64, 66}}, "0–3, 16–19, 32–35, 48–51, 64–66"},
		{[]dist.Span{{1, 1}, {5, 5}, {9, 9}, {13, 13}, {17, 17}}, "1, 5, …, 17"},
	} {
		if got := (dist.RankPlan{Ranks: tc.spans}).RanksString(); got != tc.want {
			t.Errorf("%v: %q, want %q", tc.spans, got, tc.want)
		}
	}
}
