package dist_test

import (
	"context"
	"errors"
	"fmt"
	"math/rand"
	"strings"
	"sync"
	"testing"

	"github.com/headroom-ml/headroom/comm"
	"github.com/headroom-ml/headroom/device"
	"github.com/headroom-ml/headroom/dist"
	"github.com/headroom-ml/headroom/internal/testkit"
	"github.com/headroom-ml/headroom/nn"
	"github.com/headroom-ml/headroom/train"
)

// reservedAt is the largest reservation over the ranks of l when each
// splits its share into acc passes.
func reservedAt(t *testing.T, j dist.Job, l dist.Layout, acc int) int64 {
	j.Config.Accumulation = acc
	g, err := dist.PlanRanks(context.Background(), j, l)
	if err != nil {
		t.Fatal(err)
	}
	r, _ := dist.MaxReserved(g)
	return r
}

// Each rank fits the budget by micro-batching, the ranks agree on the
// passes, and a real run of that many passes on devices capped at the
// budget peaks where its plan says; a budget no rank can meet stops every
// rank with an error naming the ranks and the smallest budget.
func TestFitRank(t *testing.T) {
	j := planJobs(t, 288)["cnn"]
	for _, n := range []int{2, 3} {
		for _, zero := range []int{0, 1} {
			l := dist.Layout{Ranks: n, Zero: zero, BucketBytes: 4096}
			whole, least := reservedAt(t, j, l, 1), reservedAt(t, j, l, 288/n)
			if least >= whole {
				t.Fatalf("ranks %d: reservation %d in one pass, %d one sample per pass", n, whole, least)
			}
			t.Run(fmt.Sprintf("ranks=%d/zero=%d", n, zero), func(t *testing.T) {
				if testing.Short() && (n == 3 || zero == 1) {
					t.Skip("-short")
				}
				budget := whole - 1
				xm, ym := j.Example(j.Batch)
				x, y := testkit.Batch(rand.New(rand.NewSource(3)), xm, ym, 10)
				var mu sync.Mutex
				accs := map[int]int{}
				err := comm.Run(context.Background(), n, func(ctx context.Context, c comm.Comm) error {
					acc, p, err := dist.FitRank(ctx, c, j, l, budget)
					if err != nil {
						return err
					}
					dev, err := device.New(fmt.Sprintf("cpu:mem=%d", budget))
					if err != nil {
						return err
					}
					s := nn.NewStore()
					m, loss := j.Build(s)
					if err := s.Materialize(dev, 1); err != nil {
						return err
					}
					defer s.Release()
					opt, _ := j.NewOptimizer()
					tr, dp, err := dist.NewTrainer(ctx, c, dev, s, m, loss, opt, j.Config, dist.Options{Stage: zero, BucketBytes: 4096})
					if err != nil {
						return err
					}
					defer dp.Close()
					defer tr.Close()
					part, err := dist.ShardBatch(train.Batch{X: x, Y: y}, c.Rank(), n)
					if err != nil {
						return err
					}
					micro, err := train.Split(part, acc)
					if err != nil {
						return err
					}
					for range 2 {
						dev.Alloc.ResetPeak()
						if _, err := tr.StepAccumulate(ctx, micro); err != nil {
							return err
						}
					}
					mu.Lock()
					defer mu.Unlock()
					accs[c.Rank()] = acc
					if peak := dev.Alloc.MaxMemoryAllocated(); peak != p.Memory.Total() || acc < 2 {
						t.Errorf("rank %d: %d passes; planned %d, measured %d", c.Rank(), acc, p.Memory.Total(), peak)
					}
					if r := dev.Alloc.Stats().ReservedBytes.Peak; r > budget {
						t.Errorf("rank %d reserved %d over the budget %d", c.Rank(), r, budget)
					}
					return nil
				})
				if err != nil {
					t.Fatal(err)
				}
				for r := range n {
					if accs[r] != accs[0] {
						t.Errorf("ranks disagree on the passes: %v", accs)
					}
				}
				t.Logf("budget %d: %v passes", budget, accs)

				// Below one sample per pass: every rank says which rank
				// and the smallest budget.
				err = comm.Run(context.Background(), n, func(ctx context.Context, c comm.Comm) error {
					_, _, err := dist.FitRank(ctx, c, j, l, least-1)
					return err
				})
				var be *dist.RankBudgetError
				if !errors.As(err, &be) || !errors.Is(err, dist.ErrBudget) || be.Smallest != least || len(be.Ranks) == 0 || be.Ranks[0] != 0 {
					t.Fatalf("budget %d: %v", least-1, err)
				}
				if strings.Count(err.Error(), "rank 0 needs "+device.FormatBytes(least)) != n {
					t.Errorf("not every rank names rank 0 and its need: %v", err)
				}
			})
		}
	}
}
