package device

import (
	"fmt"
	"strings"
)

// Category says what an allocation is for.
type Category uint8

const (
	Parameter Category = iota
	Gradient
	OptimizerState
	Activation
	Input
	Temporary
	Workspace
	// Communication is the buffers of collectives between ranks
	// (gradient buckets, shards gathered or scattered): memory that
	// distributed training spends outside the step's arena.
	Communication
	numCategories
)

var categoryNames = [...]string{"parameter", "gradient", "optimizer state", "activation", "input", "temporary", "workspace", "communication"}

func (c Category) String() string {
	if c >= numCategories {
		return fmt.Sprintf("category(%d)", c)
	}
	return categoryNames[c]
}

// Categories lists every category in display order.
func Categories() []Category {
	out := make([]Category, numCategories)
	for i := range out {
		out[i] = Category(i)
	}
	return out
}

// ParseCategory maps a plan or user category name to a Category.
func ParseCategory(s string) (Category, error) {
	for i, n := range categoryNames {
		if n == s {
			return Category(i), nil
		}
	}
	switch s {
	case "constant":
		return Input, nil
	case "buffer":
		return Parameter, nil
	}
	return 0, fmt.Errorf("unknown memory category %q (valid: %s)", s, strings.Join(categoryNames[:], ", "))
}

// Tag says who asked for an allocation: what it is for, the module path and
// the op (or parameter name) that asked.
type Tag struct {
	Category Category
	Module   string // module path, "" at top level
	Op       string
}
