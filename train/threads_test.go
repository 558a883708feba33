package train_test

import (
	"context"
	"encoding/json"
	"strings"
	"sync"
	"testing"

	"github.com/headroom-ml/headroom/device"
	"github.com/headroom-ml/headroom/internal/parallel"
	"github.com/headroom-ml/headroom/internal/testkit"
	"github.com/headroom-ml/headroom/optim"
	"github.com/headroom-ml/headroom/train"
	"github.com/headroom-ml/headroom/zoo"
)

// Two trainers in one process, stepping at the same time, each split
// their loops over a pool of their own with the thread count of their
// Config. Before, every kernel shared one process-wide pool: a trainer
// had no threads of its own to count, and the one that found the pool
// busy ran that loop on one thread. The optimizer's update (Adam's
// loops) runs on the trainer's pool too, not the process-wide one.
func TestTrainersEachGetTheirThreads(t *testing.T) {
	spec, err := zoo.Lookup("mlp")
	if err != nil {
		t.Fatal(err)
	}
	x, y := testkit.SpecBatch(spec, 64, 1)
	threads := []int{2, 3}
	trainers := make([]*train.Trainer, len(threads))
	for i, n := range threads {
		opt, _ := optim.NewAdamW(optim.AdamWDefaults())
		tr, err := train.SetupConfig(device.CPU(), 1, testkit.Build(spec), opt, train.Config{Threads: n})
		if err != nil {
			t.Fatal(err)
		}
		defer tr.Close()
		trainers[i] = tr
	}
	var shared *parallel.Pool // nil: the process-wide pool
	before := shared.Stats()
	var wg sync.WaitGroup
	errs := make([]error, len(trainers))
	for i, tr := range trainers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range 3 {
				if _, err := tr.Step(context.Background(), x, y); err != nil {
					errs[i] = err
					return
				}
			}
		}()
	}
	wg.Wait()
	if after := shared.Stats(); after.Loops != before.Loops || after.Inline != before.Inline {
		t.Errorf("the process-wide pool ran loops of the trainers' steps: %+v, then %+v", before, after)
	}
	for i, tr := range trainers {
		if errs[i] != nil {
			t.Fatalf("trainer %d: %v", i, errs[i])
		}
		st, own := train.PoolStats(tr)
		if !own {
			t.Fatalf("trainer %d has no pool of its own", i)
		}
		if tr.Threads() != threads[i] || st.Workers != int64(threads[i]-1) || st.Loops == 0 || st.Inline != 0 {
			t.Errorf("trainer %d (Threads %d): Threads() = %d, pool %+v; want %d workers, parallel loops, none run inline",
				i, threads[i], tr.Threads(), st, threads[i]-1)
		}
	}
}

// Threads 0 follows the process-wide count (still on the trainer's own
// pool); SetConfig changes the count; a negative count is refused.
func TestConfigThreads(t *testing.T) {
	defer parallel.SetThreads(parallel.SetThreads(3))
	spec, _ := zoo.Lookup("mlp")
	opt, _ := optim.NewSGD(optim.SGDConfig{LR: 0.01})
	tr, err := train.Setup(device.CPU(), 1, testkit.Build(spec), opt)
	if err != nil {
		t.Fatal(err)
	}
	defer tr.Close()
	if tr.Threads() != 3 {
		t.Fatalf("Threads() = %d with Config.Threads 0, want the process-wide 3", tr.Threads())
	}
	parallel.SetThreads(4)
	if tr.Threads() != 4 {
		t.Fatalf("Threads() = %d after the process-wide count became 4", tr.Threads())
	}
	if err := tr.SetConfig(train.Config{Threads: 2}); err != nil {
		t.Fatal(err)
	}
	if tr.Threads() != 2 || !strings.Contains(tr.Config().String(), "threads=2") {
		t.Fatalf("Threads() = %d, config %q after SetConfig(Threads: 2)", tr.Threads(), tr.Config())
	}
	if err := tr.SetConfig(train.Config{Threads: -1}); err == nil || tr.Config().Threads != 2 {
		t.Fatalf("SetConfig(Threads: -1) = %v, config now %v; want an error and no change", err, tr.Config())
	}
}

// Threads survives JSON, and a configuration without it is written as
// before it existed.
func TestConfigThreadsJSON(t *testing.T) {
	b, err := json.Marshal(train.Config{Threads: 4})
	if err != nil {
		t.Fatal(err)
	}
	var back train.Config
	if err := json.Unmarshal(b, &back); err != nil || back.Threads != 4 {
		t.Fatalf("%s read back as %+v, %v", b, back, err)
	}
	if b, _ := json.Marshal(train.Config{}); strings.Contains(string(b), "Threads") {
		t.Fatalf("the zero Config marshals as %s, naming Threads", b)
	}
}
