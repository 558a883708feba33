package bench

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"time"

	"github.com/headroom-ml/headroom/internal/cpuid"
	benchscript "github.com/headroom-ml/headroom/scripts/bench"
	"github.com/headroom-ml/headroom/scripts/reference"
)

// WriteScript writes the embedded PyTorch script, and the model definitions
// it imports, into dir and returns the script's path: the benchmark runs
// from any directory, with the script of the binary's own version.
func WriteScript(dir string) (string, error) {
	files := []struct{ name, text string }{
		{benchscript.Name, benchscript.Script},
		{reference.TorchModelsName, reference.TorchModels},
	}
	for _, f := range files {
		if err := os.WriteFile(filepath.Join(dir, f.name), []byte(f.text), 0o644); err != nil {
			return "", err
		}
	}
	return filepath.Join(dir, benchscript.Name), nil
}

// ISA levels of x86 vector code, for telling whether a BLAS runs kernels as
// wide as the machine allows.
const (
	LevelUnknown = iota
	LevelSSE
	LevelAVX
	LevelAVX2
	LevelAVX512
)

// openBLASCores maps OpenBLAS's x86 core names (as OPENBLAS_VERBOSE prints
// them, lower-cased) to the widest instructions their kernels use.
var openBLASCores = map[string]int{
	"katmai": LevelSSE, "coppermine": LevelSSE, "northwood": LevelSSE, "prescott": LevelSSE, "banias": LevelSSE,
	"core2": LevelSSE, "penryn": LevelSSE, "dunnington": LevelSSE, "nehalem": LevelSSE, "atom": LevelSSE,
	"opteron": LevelSSE, "opteron_sse3": LevelSSE, "barcelona": LevelSSE, "nano": LevelSSE, "generic": LevelSSE,
	"sandybridge": LevelAVX, "bulldozer": LevelAVX, "piledriver": LevelAVX,
	"haswell": LevelAVX2, "zen": LevelAVX2, "steamroller": LevelAVX2, "excavator": LevelAVX2,
	"skylakex": LevelAVX512, "cooperlake": LevelAVX512, "sapphirerapids": LevelAVX512,
}

// OpenBLASCoreLevel is the ISA level of an OpenBLAS core name (LevelUnknown
// for a name it does not know).
func OpenBLASCoreLevel(core string) int { return openBLASCores[strings.ToLower(core)] }

// MachineLevel is the widest ISA level the CPU and OS run. AVX-512 counts
// only with BW and VL, which OpenBLAS's SkylakeX kernels need.
func MachineLevel(f cpuid.Features) int {
	switch {
	case f.AVX512F && f.AVX512BW && f.AVX512VL:
		return LevelAVX512
	case f.AVX2 && f.FMA:
		return LevelAVX2
	case f.AVX2:
		return LevelAVX
	}
	return LevelUnknown // not x86, or too old to say
}

// OpenBLASCoreFor is the OPENBLAS_CORETYPE that runs the widest kernels on
// a CPU with features f ("" if there is nothing to choose).
func OpenBLASCoreFor(f cpuid.Features) string {
	switch MachineLevel(f) {
	case LevelAVX512:
		if f.AVX512BF16 {
			return "Cooperlake" // SkylakeX's kernels plus its bf16 GEMM
		}
		return "SkylakeX"
	case LevelAVX2:
		return "Haswell"
	}
	return ""
}

var openBLASCoreLine = regexp.MustCompile(`(?m)^\s*Core:\s*(\S+)\s*$`)

// ParseOpenBLASCore finds the core OpenBLAS reports when it loads with
// OPENBLAS_VERBOSE=2 ("Core: Haswell") in a process's output; the last
// report wins (a process may load it twice). ok is false when there is none
// (no OpenBLAS, or one built for a single core, which does not say).
func ParseOpenBLASCore(out string) (core string, ok bool) {
	m := openBLASCoreLine.FindAllStringSubmatch(out, -1)
	if len(m) == 0 {
		return "", false
	}
	return m[len(m)-1][1], true
}

// ParseTorchConfig reads the BLAS (BLAS_INFO), whether oneDNN is built in
// (USE_MKLDNN) and the vector code ATen's own kernels use ("CPU capability
// usage: AVX2") from torch.__config__.show()'s text.
func ParseTorchConfig(out string) (blas string, onednn bool, capability string) {
	sc := bufio.NewScanner(strings.NewReader(out))
	for sc.Scan() {
		if c, ok := strings.CutPrefix(strings.TrimSpace(sc.Text()), "- CPU capability usage:"); ok {
			capability = strings.TrimSpace(c)
		}
		for _, f := range strings.FieldsFunc(sc.Text(), func(r rune) bool { return r == ',' || r == ' ' || r == '\t' }) {
			k, v, ok := strings.Cut(f, "=")
			if !ok {
				continue
			}
			switch k {
			case "BLAS_INFO":
				blas = v
			case "USE_MKLDNN":
				onednn = v == "ON" || v == "1"
			}
		}
	}
	return blas, onednn, capability
}

var blasLibraryLine = regexp.MustCompile(`(?m)^\s*BLAS library:\s*(\S+)\s*$`)

// ParseBLASLibrary reads the file of the BLAS whose sgemm the peer calls
// (the "BLAS library: /path" line of the script's --openblas-core mode).
func ParseBLASLibrary(out string) (path string, ok bool) {
	m := blasLibraryLine.FindStringSubmatch(out)
	if m == nil {
		return "", false
	}
	return m[1], true
}

// BLASLibrary names the BLAS implementation of a library file (symlinks
// resolved): "OpenBLAS", "MKL", "BLIS", "ATLAS", "reference" (netlib's,
// which Debian's libblas3 installs under .../blas/, reached through
// torch's generic libblas.so.3 when no optimized BLAS is installed) or ""
// when it is not recognised.
func BLASLibrary(path string) string {
	low := strings.ToLower(path)
	switch {
	case strings.Contains(low, "openblas"):
		return "OpenBLAS"
	case strings.Contains(low, "mkl"):
		return "MKL"
	case strings.Contains(low, "blis"):
		return "BLIS"
	case strings.Contains(low, "atlas"):
		return "ATLAS"
	case filepath.Base(filepath.Dir(low)) == "blas" && strings.HasPrefix(filepath.Base(low), "libblas.so"):
		return "reference"
	}
	return ""
}

// ErrReferenceBLAS is CheckPeer's error when PyTorch's matrix products run
// on the unoptimized reference BLAS: a comparison with it would flatter
// headroom by an order of magnitude.
var ErrReferenceBLAS = errors.New("PyTorch's matrix products run on the reference BLAS")

// PeerCheck is what CheckPeer found of the PyTorch peer's kernels.
type PeerCheck struct {
	BLAS string // torch's BLAS_INFO ("open": OpenBLAS, "mkl", ...)
	// Library is the file of the BLAS whose sgemm the peer calls ("" if
	// unknown) and Impl the implementation it is (BLASLibrary).
	Library, Impl string
	OneDNN        bool // convolutions through oneDNN (mkldnn)
	// Capability is the vector code of ATen's own kernels ("AVX2").
	Capability string
	// Core is the OpenBLAS core it loaded with ("" if it did not say).
	Core string
	// Set is the OPENBLAS_CORETYPE bench sets for the peer's processes
	// alone because Core was narrower than the machine (a misdetection);
	// "" when none is needed. FixedCore is what OpenBLAS then reported.
	Set, FixedCore string
	// UserSet is OPENBLAS_CORETYPE as found in bench's own environment,
	// which is left alone.
	UserSet string
	// MaxISA is headroom's $HEADROOM_MAX_ISA ("" for none) and Limit the
	// environment that limits the peer's kernels the same way (PeerLimit).
	MaxISA string
	Limit  []string
}

// Env is what the peer's processes get added to their environment.
func (p PeerCheck) Env() []string {
	env := append([]string(nil), p.Limit...)
	if p.Set != "" {
		env = append(env, "OPENBLAS_CORETYPE="+p.Set)
	}
	return env
}

// PeerLimit is the environment that limits PyTorch's kernels to the
// instruction sets $HEADROOM_MAX_ISA=isa leaves headroom's (cpuid.ISAs),
// so that both engines run as on the narrower machine: oneDNN's
// convolutions (ONEDNN_MAX_CPU_ISA), ATen's own kernels
// (ATEN_CPU_CAPABILITY) and OpenBLAS's core (OPENBLAS_CORETYPE, unless the
// user set one). nil for no limit.
func PeerLimit(isa string, userCore bool) []string {
	var onednn, aten, core string
	switch strings.ToLower(strings.TrimSpace(isa)) {
	case "none":
		onednn, aten, core = "SSE41", "default", "Nehalem"
	case "avx2":
		onednn, aten, core = "AVX2", "avx2", "Haswell"
	case "avx512":
		onednn, aten, core = "AVX512_CORE", "avx512", "SkylakeX"
	case "avx512_bf16":
		onednn, aten, core = "AVX512_CORE_BF16", "avx512", "Cooperlake"
	default:
		return nil
	}
	env := []string{"ONEDNN_MAX_CPU_ISA=" + onednn, "ATEN_CPU_CAPABILITY=" + aten}
	if !userCore {
		env = append(env, "OPENBLAS_CORETYPE="+core)
	}
	return env
}

// String describes the check for the run's header.
func (p PeerCheck) String() string {
	var b strings.Builder
	fmt.Fprintf(&b, "BLAS %s", orDash(p.BLAS))
	if p.Impl != "" {
		fmt.Fprintf(&b, " (%s: %s)", p.Impl, p.Library)
	}
	fmt.Fprintf(&b, ", oneDNN %v, ATen kernels %s", p.OneDNN, orDash(p.Capability))
	if len(p.Limit) > 0 {
		fmt.Fprintf(&b, "; limited as headroom is (HEADROOM_MAX_ISA=%s): %s", p.MaxISA, strings.Join(p.Limit, " "))
	}
	switch {
	case p.Core == "":
		b.WriteString("; OpenBLAS did not report a core (OPENBLAS_VERBOSE=2)")
	case p.UserSet != "" || len(p.Limit) > 0 && p.Set == "":
		if p.UserSet != "" {
			fmt.Fprintf(&b, "; OpenBLAS core %s (OPENBLAS_CORETYPE=%s from the environment)", p.Core, p.UserSet)
		} else {
			fmt.Fprintf(&b, "; OpenBLAS core %s", p.Core)
		}
	case p.Set != "":
		fmt.Fprintf(&b, "; OpenBLAS misdetected this CPU as %s: set OPENBLAS_CORETYPE=%s for PyTorch's processes only (it then reported %s)",
			p.Core, p.Set, orDash(p.FixedCore))
	default:
		fmt.Fprintf(&b, "; OpenBLAS core %s", p.Core)
	}
	return b.String()
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

// DecidePeer decides, from what the peer reported, whether its OpenBLAS
// needs OPENBLAS_CORETYPE on a machine with features f: when the core it
// chose uses narrower vectors than the machine runs, and the user did not
// set one.
func DecidePeer(p PeerCheck, f cpuid.Features) PeerCheck {
	if p.Core == "" || p.UserSet != "" {
		return p
	}
	lvl := OpenBLASCoreLevel(p.Core)
	if lvl != LevelUnknown && lvl < MachineLevel(f) {
		p.Set = OpenBLASCoreFor(f)
	}
	return p
}

// CheckPeer runs the PyTorch script once with OPENBLAS_VERBOSE=2 and reads
// the BLAS and the OpenBLAS core; if the core is a misdetection it decides
// the OPENBLAS_CORETYPE to set and runs once more to confirm it. It fails
// with ErrReferenceBLAS when the peer's BLAS is the reference one. With
// maxISA (headroom's $HEADROOM_MAX_ISA, f already limited by it) the peer
// runs limited the same way (PeerLimit) and the core is its limited one.
func CheckPeer(ctx context.Context, python, script string, threads int, f cpuid.Features, maxISA string) (PeerCheck, error) {
	user := os.Getenv("OPENBLAS_CORETYPE")
	lim := PeerLimit(maxISA, user != "")
	run := func(extra ...string) (string, error) {
		cctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
		defer cancel()
		cmd := exec.CommandContext(cctx, python, script, "--workload", "openblas", "--openblas-core", "--threads", fmt.Sprint(threads))
		cmd.Env = append(append(append(os.Environ(), "OPENBLAS_VERBOSE=2"), lim...), extra...)
		out, err := cmd.CombinedOutput()
		if err != nil {
			return string(out), fmt.Errorf("bench: checking PyTorch's BLAS: %v%s", err, lastLine(string(out)))
		}
		return string(out), nil
	}
	out, err := run()
	if err != nil {
		return PeerCheck{}, err
	}
	var p PeerCheck
	p.BLAS, p.OneDNN, p.Capability = ParseTorchConfig(out)
	p.Core, _ = ParseOpenBLASCore(out)
	if lib, ok := ParseBLASLibrary(out); ok {
		p.Library, p.Impl = lib, BLASLibrary(lib)
	}
	if p.Impl == "reference" {
		return p, fmt.Errorf("bench: %w (%s), 10-40x slower than an optimized one, which would flatter headroom: install OpenBLAS for it (apt-get install libopenblas0-pthread) and run again", ErrReferenceBLAS, p.Library)
	}
	p.UserSet, p.Limit = user, lim
	if lim != nil {
		p.MaxISA = strings.ToLower(strings.TrimSpace(maxISA))
		return p, nil // the core is the one the limit chose
	}
	p = DecidePeer(p, f)
	if p.Set != "" {
		out, err := run(p.Env()...)
		if err != nil {
			return p, err
		}
		p.FixedCore, _ = ParseOpenBLASCore(out)
	}
	return p, nil
}
