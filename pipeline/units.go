package pipeline

import (
	"errors"
	"fmt"

	"github.com/headroom-ml/headroom/zoo"
	"strings"

	"github.com/headroom-ml/headroom/nn"
	"github.com/headroom-ml/headroom/train"
)

// The zoo's non-sequential models are cut at their repeated units
// (residual blocks, transformer blocks, RRDB blocks), with what comes
// before the first unit (stem, embeddings) and after the last (head) in
// the first and last unit. A unit is the zoo's own module: each Layer
// builds the whole zoo model into a scratch store (its parameters'
// metadata only, nothing is allocated) and adopts into the stage's store
// the parameters of the modules it runs, under the zoo's names, so a
// pipeline's state dict is the single-device model's and checkpoints
// load either way.

// unit builds a zoo model into a scratch store with build, picks the
// modules a unit runs with pick (their parameters are those under the
// prefixes it returns) and adopts those parameters into b's store.
func unit[M any](b nn.Builder, build func(nn.Builder) M, pick func(M) (train.Model, []string)) train.Model {
	scratch := nn.NewStore()
	m := build(scratch.Root())
	model, prefixes := pick(m)
	adopt(b.Store(), scratch, prefixes)
	if t, ok := model.(tiedModel); ok {
		t.scratch = scratch
		return t
	}
	return tiedModel{Model: model, scratch: scratch}
}

// adopt adds to dst the parameters of src under any of prefixes (a name
// equal to a prefix or below it), except those dst already holds: a
// weight tied between two units of one stage is one parameter there.
func adopt(dst, src *nn.Store, prefixes []string) {
	for _, p := range src.Params() {
		for _, pre := range prefixes {
			if p.Name == pre || strings.HasPrefix(p.Name, pre+".") {
				if _, ok := dst.Get(p.Name); !ok {
					dst.Add(p)
				}
				break
			}
		}
	}
}

// ZooLayers is a zoo model that is not a plain list of layers as
// pipeline layers cut at its repeated units: the ResNets (residual
// blocks), the GPTs (transformer blocks) and RRDBNet (RRDB blocks).
func ZooLayers(spec zoo.Spec) ([]Layer, error) {
	switch m := spec.New(nn.NewStore().Root()).(type) {
	case *zoo.ResNet:
		return ResNetLayers(m.Config)
	case *zoo.GPT:
		return GPTLayers(m.Config)
	case *zoo.RRDBNet:
		return RRDBNetLayers(m.Config)
	}
	return nil, fmt.Errorf("%w: %s", ErrNoUnits, spec.Name)
}

// ErrNoUnits is matched by errors.Is when ZooLayers does not know how to
// cut a model.
var ErrNoUnits = errors.New("pipeline: a model pipeline stages are not cut from")
