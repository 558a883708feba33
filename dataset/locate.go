package dataset

import (
	"context"
	"embed"
	"fmt"
	"io/fs"
	"os"

	"github.com/headroom-ml/headroom/internal/env"
)

//go:generate go run ./internal/mksubset -src /usr/share/datasets/fashion-mnist -out fashionmnist -facts testdata/subset-facts.json -train 2000 -test 500

// The subset is embedded rather than read from the source tree so that the
// binary works from any directory and on machines without the Debian package.
//
//go:embed fashionmnist/*.gz
var subset embed.FS

// SystemDir is where Debian's dataset-fashion-mnist package installs the
// full dataset.
const SystemDir = "/usr/share/datasets/fashion-mnist"

// EnvDir names an environment variable that, when set, points to a directory
// holding the Fashion-MNIST files (for example a torchvision download's
// FashionMNIST/raw); it takes precedence over SystemDir.
const EnvDir = env.FashionMNIST

// Embedded is the Source of datasets loaded from the embedded subset.
const Embedded = "embedded:dataset/fashionmnist"

// The size of the embedded subset: the first SubsetTrain training and
// SubsetTest test examples of the full dataset, in file order.
const (
	SubsetTrain = 2000
	SubsetTest  = 500
)

// Subset returns the embedded subset, laid out as the Debian package lays out
// the full dataset.
func Subset() fs.FS {
	sub, err := fs.Sub(subset, "fashionmnist")
	if err != nil {
		panic(err) // cannot happen: the directory is embedded
	}
	return sub
}

// Locate finds Fashion-MNIST: the directory named by $HEADROOM_FASHION_MNIST
// if set, else SystemDir if it exists, else the embedded subset. source names
// what was found (a directory, or Embedded); full is false only for the
// embedded subset. A directory that exists but
// lacks some of the files is an error, not a reason to fall back quietly to
// a thirtieth of the data.
func Locate() (fsys fs.FS, source string, full bool, err error) {
	dir, _ := env.Lookup(EnvDir)
	return locate(dir, SystemDir)
}

// locate is Locate with its inputs explicit, so that tests can take every
// branch whatever is installed on the machine.
func locate(envDir, systemDir string) (fsys fs.FS, source string, full bool, err error) {
	dir := envDir
	if dir == "" {
		if _, err := os.Stat(systemDir); err != nil {
			return Subset(), Embedded, false, nil
		}
		dir = systemDir
	}
	fsys = os.DirFS(dir)
	for _, base := range []string{"train-images-idx3-ubyte", "train-labels-idx1-ubyte", "t10k-images-idx3-ubyte", "t10k-labels-idx1-ubyte"} {
		if _, err := find(fsys, dir, base); err != nil {
			if envDir != "" {
				err = fmt.Errorf("%w (from $%s)", err, EnvDir)
			}
			return nil, "", false, err
		}
	}
	return fsys, dir, true, nil
}

// Open loads both splits from where Locate finds them.
func Open() (train, test *Dataset, source string, err error) {
	return OpenContext(context.Background())
}

// OpenContext is Open, abandoned when ctx is done (see LoadContext).
func OpenContext(ctx context.Context) (train, test *Dataset, source string, err error) {
	fsys, source, _, err := Locate()
	if err != nil {
		return nil, nil, "", err
	}
	if train, err = LoadContext(ctx, fsys, source, Train); err != nil {
		return nil, nil, "", err
	}
	if test, err = LoadContext(ctx, fsys, source, Test); err != nil {
		return nil, nil, "", err
	}
	return train, test, source, nil
}
