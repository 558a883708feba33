package optim

import (
	"errors"
	"testing"
)

// A literal that sets the learning rate but not betas and eps gets the
// zero value's betas (0, 0) and eps 0, not PyTorch's: it is refused.
func TestAdamZeroBetasRefused(t *testing.T) {
	for _, c := range []struct {
		name string
		cfg  AdamConfig
		bad  bool
	}{
		{"lr and weight decay only", AdamConfig{LR: 1e-3, WeightDecay: 1e-2}, true},
		{"lr only", AdamConfig{LR: 1e-3}, true},
		{"defaults", AdamDefaults(), false},
		{"beta1 0 on purpose", AdamConfig{LR: 1e-3, Beta2: 0.99, Eps: 1e-8}, false},
		{"eps set", AdamConfig{LR: 1e-3, Eps: 1e-8}, false},
		{"zero value", AdamConfig{}, false}, // lr 0: valid in PyTorch, kept
	} {
		for kind, mk := range map[string]func(AdamConfig) (*Adam, error){"Adam": NewAdam, "AdamW": NewAdamW} {
			_, err := mk(c.cfg)
			if got := errors.Is(err, ErrUnsetBetas); got != c.bad {
				t.Errorf("%s %s: err %v, want ErrUnsetBetas %v", kind, c.name, err, c.bad)
			}
			var ce *ConfigError
			if c.bad && (!errors.As(err, &ce) || ce.Kind != kind) {
				t.Errorf("%s %s: err %v, want a *ConfigError of kind %s", kind, c.name, err, kind)
			}
		}
	}
}
