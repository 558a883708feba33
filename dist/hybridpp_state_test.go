package dist

import (
	"context"
	"reflect"
	"testing"

	"github.com/headroom-ml/headroom/comm"
	"github.com/headroom-ml/headroom/optim"
)

// A replica's stage optimizer saves and loads the inner optimizer's
// state (checkpoints of a stage are those of a stage without replicas);
// one that cannot is refused.
func TestReplicaOptState(t *testing.T) {
	data, err := comm.Meta(0, 1)
	if err != nil {
		t.Fatal(err)
	}
	newAdam := func() (optim.Optimizer, error) { return optim.NewAdam(optim.AdamDefaults()) }
	wrap := replicaOptimizer(newAdam, data, ReplicaOptions{}, &replicaShared{ctx: context.Background(), share: 1})
	opt, _ := wrap()
	ps := []optim.Param{{Name: "w", Value: []float32{1, 2, 3}, Grad: []float32{0.5, -1, 2}}}
	if err := opt.(optim.Preparer).Prepare(ps); err != nil {
		t.Fatal(err)
	}
	if err := opt.Step(ps); err != nil {
		t.Fatal(err)
	}
	saved := opt.(optim.Stateful).SaveState()
	inner := opt.(*replicaOpt).inner.(optim.Stateful).SaveState()
	if !reflect.DeepEqual(saved, inner) || len(saved.Buffers["w"]) == 0 {
		t.Fatalf("saved %+v, the inner optimizer's %+v", saved, inner)
	}
	other, _ := wrap()
	if err := other.(optim.Stateful).LoadState(saved); err != nil {
		t.Fatal(err)
	}
	if got := other.(optim.Stateful).SaveState(); !reflect.DeepEqual(got, saved) {
		t.Fatalf("loaded %+v, saved %+v", got, saved)
	}
	plain := &replicaOpt{inner: statelessOpt{}}
	if err := plain.LoadState(saved); err == nil {
		t.Fatal("a state loaded into an optimizer that has none")
	}
}

type statelessOpt struct{ optim.Optimizer }
