package transform

import (
	"errors"
	"testing"

	"github.com/headroom-ml/headroom/internal/env"
	"github.com/headroom-ml/headroom/trace"
)

// A HEADROOM_FUSE that is not a switch is refused, not read as "on".
func TestFuseEnvRefusesNonSwitch(t *testing.T) {
	t.Setenv(env.Fuse, "sometimes")
	if _, _, err := Fuse(trace.New()); !errors.Is(err, env.ErrValue) {
		t.Fatalf("Fuse with %s=sometimes: %v, want env.ErrValue", env.Fuse, err)
	}
}
