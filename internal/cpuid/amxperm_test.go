package cpuid

import (
	"runtime"
	"strings"
	"testing"
)

// RequestAMX answers the same on every call, and where the CPU has no
// AMX (or the build cannot ask) it refuses with a reason that names what
// was asked and why it failed; where the CPU has AMX on linux/amd64 the
// answer may go either way (a sandbox can refuse), but a refusal still
// says why.
func TestRequestAMX(t *testing.T) {
	err := RequestAMX()
	if err2 := RequestAMX(); err2 != err {
		t.Fatalf("second call %v, first %v: want the same answer", err2, err)
	}
	linux := runtime.GOOS == "linux" && runtime.GOARCH == "amd64" && asm
	if err == nil {
		if !linux || !Detected.AMXTile {
			t.Fatalf("permission granted on %s/%s with AMXTile %v", runtime.GOOS, runtime.GOARCH, Detected.AMXTile)
		}
		t.Log("AMX permission granted")
		return
	}
	msg := err.Error()
	want := []string{"AMX", "linux/amd64"}
	if linux {
		want = []string{"ARCH_REQ_XCOMP_PERM", "XTILEDATA"}
	}
	for _, w := range want {
		if !strings.Contains(msg, w) {
			t.Errorf("reason %q does not mention %q", msg, w)
		}
	}
	if linux && !Detected.AMXTile && !strings.Contains(msg, "no AMX") && !strings.Contains(msg, "seccomp") {
		t.Errorf("reason %q on a CPU without AMX: want the kernel's or the sandbox's cause", msg)
	}
	t.Logf("AMX refused: %v", err)
}
