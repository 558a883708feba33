#!/usr/bin/env bash
# run.sh BINARY [ARGS...]
#
# Runs a static Linux/amd64 program (typically a Go test binary built with
# CGO_ENABLED=0 go test -c) inside the Bochs x86 emulator configured as an
# AVX-512 CPU, prints its output and exits with its exit status. Bochs boots
# Debian's Linux kernel with an initramfs holding the program and a tiny init
# (init/main.go), which runs it with its output on the emulated serial port
# and powers the machine off. See README.md beside this file.
#
# Exit status: the program's; 124 if it did not finish (timeout, kernel
# panic, boot failure); 125 if this script could not set the run up.
#
# Environment (all optional):
#   HEADROOM_BOCHS_CPU      Bochs CPU model: corei7_skylake_x (default:
#                           AVX512F/CD/BW/DQ/VL) or tigerlake (adds VNNI,
#                           VBMI, VBMI2, BITALG, VPOPCNTDQ, IFMA, ...)
#   HEADROOM_BOCHS_MEGS     guest memory in MiB (512)
#   HEADROOM_BOCHS_TIMEOUT  seconds before the emulator is killed (1800)
#   HEADROOM_BOCHS_IPS      emulated instructions per emulated second
#                           (20000000); the guest's TSC is told the same rate
#   HEADROOM_BOCHS_ENV      whitespace-separated KEY=VALUE pairs for the program
#   HEADROOM_BOCHS_WORKDIR  directory copied into the guest as the program's
#                           working directory (e.g. a package directory with
#                           testdata/); default: an empty directory
#   HEADROOM_BOCHS_APPEND   extra kernel command-line words
#   HEADROOM_BOCHS_VERBOSE  1: show the kernel's boot messages (slower: the
#                           kernel writes its console a character at a time)
#   HEADROOM_BOCHS_DMESG    1: print the kernel log before running the program
#   HEADROOM_BOCHS_BOOT     direct (default) or iso: boot through ISOLINUX from
#                           a CD image instead (about 100 s slower)
#   HEADROOM_BOCHS_KEEP     1: keep the run directory (bochsrc, logs, images)
#   HEADROOM_BOCHS_CACHE    cache directory (default $XDG_CACHE_HOME/headroom-bochs
#                           if XDG_CACHE_HOME is set, else /tmp/headroom-bochs)
set -euo pipefail

die() {
	echo "run.sh: $*" >&2
	exit 125
}

[ $# -ge 1 ] || die "usage: $0 BINARY [ARGS...]"
BIN=$1
shift
[ -f "$BIN" ] && [ -x "$BIN" ] || die "$BIN: not an executable file"
if command -v readelf >/dev/null 2>&1; then
	hdr=$(readelf -h -l "$BIN" 2>/dev/null) || die "$BIN: not an ELF file"
	grep -q 'Advanced Micro Devices X86-64' <<<"$hdr" || die "$BIN: not an x86-64 binary"
	if grep -q 'program interpreter' <<<"$hdr"; then
		die "$BIN: dynamically linked; build it with CGO_ENABLED=0"
	fi
fi

HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
CPU_MODEL=${HEADROOM_BOCHS_CPU:-corei7_skylake_x}
MEGS=${HEADROOM_BOCHS_MEGS:-512}
TIMEOUT=${HEADROOM_BOCHS_TIMEOUT:-1800}
IPS=${HEADROOM_BOCHS_IPS:-20000000}
BOOT=${HEADROOM_BOCHS_BOOT:-direct}
VERBOSE=${HEADROOM_BOCHS_VERBOSE:-0}
case $BOOT in direct | iso) ;; *) die "HEADROOM_BOCHS_BOOT=$BOOT: want direct or iso" ;; esac
case $IPS in '' | *[!0-9]*) die "HEADROOM_BOCHS_IPS=$IPS: want a number" ;; esac
[ "$IPS" -ge 1000000 ] && [ "$IPS" -le 4000000000 ] || die "HEADROOM_BOCHS_IPS=$IPS: want 1000000..4000000000"
if [ -n "${HEADROOM_BOCHS_CACHE:-}" ]; then
	CACHE=$HEADROOM_BOCHS_CACHE
elif [ -n "${XDG_CACHE_HOME:-}" ]; then
	CACHE=$XDG_CACHE_HOME/headroom-bochs
else
	CACHE=/tmp/headroom-bochs
fi
mkdir -p "$CACHE"
# Run directories of runs that were killed before they could clean up.
find "$CACHE" -maxdepth 1 -name 'run.*' -mmin +240 -exec rm -rf {} + 2>/dev/null || true

# ---- tools -----------------------------------------------------------------
need=()
command -v bochs-bin >/dev/null 2>&1 || need+=(bochs)
[ -f /usr/share/bochs/BIOS-bochs-latest ] || need+=(bochsbios)
[ -f /usr/share/vgabios/vgabios.bin ] || need+=(vgabios)
# Debian builds Bochs without the "nogui" display; the ncurses one (bochs-term)
# runs headless, drawing the unused VGA text screen into a log file.
[ -e /usr/lib/x86_64-linux-gnu/bochs/plugins/libbx_term_gui.so.0 ] || need+=(bochs-term)
command -v cpio >/dev/null 2>&1 || need+=(cpio)
command -v xz >/dev/null 2>&1 || need+=(xz-utils)
if [ "$BOOT" = iso ]; then
	command -v xorriso >/dev/null 2>&1 || need+=(xorriso)
	[ -f /usr/lib/ISOLINUX/isolinux.bin ] || need+=(isolinux)
	[ -f /usr/lib/syslinux/modules/bios/ldlinux.c32 ] || need+=(syslinux-common)
else
	{ command -v as && command -v ld && command -v objcopy; } >/dev/null 2>&1 || need+=(binutils)
fi
command -v go >/dev/null 2>&1 || die "go is not on PATH (needed to build the init)"
SUDO=
if [ "$(id -u)" != 0 ]; then SUDO="sudo -n"; fi
apt_updated=
apt_update() {
	if [ -z "$apt_updated" ]; then
		$SUDO apt-get update -qq >&2 || die "apt-get update failed"
		apt_updated=1
	fi
}
if [ ${#need[@]} -gt 0 ]; then
	echo "run.sh: installing ${need[*]}" >&2
	apt_update
	DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${need[@]}" >&2 ||
		die "apt-get install ${need[*]} failed"
fi

# ---- kernel (Debian's, cached) ---------------------------------------------
KERNEL=$CACHE/vmlinuz
if [ ! -s "$KERNEL" ]; then
	pkg=$(apt-cache depends linux-image-amd64 2>/dev/null | awk '/Depends: linux-image-[0-9]/ {print $2; exit}') || true
	if [ -z "$pkg" ]; then
		apt_update
		pkg=$(apt-cache depends linux-image-amd64 | awk '/Depends: linux-image-[0-9]/ {print $2; exit}')
	fi
	[ -n "$pkg" ] || die "cannot resolve linux-image-amd64's kernel package"
	echo "run.sh: downloading $pkg" >&2
	dl=$CACHE/dl.$$
	rm -rf "$dl" && mkdir -p "$dl"
	# (apt warns that it downloads unsandboxed into a root-owned directory: harmless.)
	(cd "$dl" && apt-get download "$pkg" >"$dl.log" 2>&1) ||
		(apt_update && cd "$dl" && apt-get download "$pkg" >"$dl.log" 2>&1) ||
		{ cat "$dl.log" >&2; die "apt-get download $pkg failed"; }
	(cd "$dl" && dpkg-deb --fsys-tarfile ./*.deb | tar -x --wildcards './boot/vmlinuz-*') ||
		die "no /boot/vmlinuz-* in $pkg"
	mv "$dl"/boot/vmlinuz-* "$KERNEL.$$" && mv "$KERNEL.$$" "$KERNEL"
	echo "$pkg" >"$CACHE/vmlinuz.pkg"
	rm -rf "$dl" "$dl.log"
fi

# ---- init, mkboot, boot stub (cached; rebuilt when their sources change) ----
build_go() { # build_go SRC OUT
	if [ ! -x "$2" ] || [ "$1" -nt "$2" ]; then
		(cd "$(dirname "$1")" && CGO_ENABLED=0 GOOS=linux GOARCH=amd64 \
			go build -trimpath -ldflags=-s -o "$2.$$" "$(basename "$1")") || die "building $1 failed"
		mv "$2.$$" "$2"
	fi
}
INIT=$CACHE/init
build_go "$HERE/init/main.go" "$INIT"
MKBOOT=$CACHE/mkboot
STUB=$CACHE/stub.bin
KIMG=$CACHE/vmlinux.bin
if [ "$BOOT" = direct ]; then
	build_go "$HERE/boot/main.go" "$MKBOOT"
	if [ ! -s "$STUB" ] || [ "$HERE/boot/stub.s" -nt "$STUB" ]; then
		{ as --64 -o "$STUB.$$.o" "$HERE/boot/stub.s" &&
			ld -m elf_x86_64 -Ttext=0 -e 0 -o "$STUB.$$.elf" "$STUB.$$.o" &&
			objcopy -O binary -j .text "$STUB.$$.elf" "$STUB.$$"; } || die "assembling boot/stub.s failed"
		mv "$STUB.$$" "$STUB"
		rm -f "$STUB.$$.o" "$STUB.$$.elf"
	fi
	# The flattened kernel is mkboot's output: redo it when mkboot changes.
	if [ -e "$KIMG" ] && { [ "$MKBOOT" -nt "$KIMG" ] || [ "$KERNEL" -nt "$KIMG" ]; }; then
		rm -f "$KIMG" "$KIMG.info"
	fi
fi

# ---- run directory: initramfs, disk image, bochsrc -----------------------------
RUN=$(mktemp -d "$CACHE/run.XXXXXX")
BPID=
WPID=
stop_bochs() {
	kill -KILL "$BPID" 2>/dev/null || true
	for _ in 1 2 3 4 5 6 7 8 9 10; do
		kill -0 "$BPID" 2>/dev/null || break
		sleep 0.1
	done
}
cleanup() {
	if [ -n "$WPID" ]; then kill "$WPID" 2>/dev/null || true; fi
	if [ -n "$BPID" ]; then stop_bochs; fi
	if [ "${HEADROOM_BOCHS_KEEP:-0}" = 1 ]; then
		echo "run.sh: kept $RUN" >&2
	else
		rm -rf "$RUN"
	fi
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

root=$RUN/root
mkdir -p "$root"/{dev,proc,sys,tmp,headroom/bin}
cp "$INIT" "$root/init"
name=$(basename "$BIN")
cp "$BIN" "$root/headroom/bin/$name"
chmod 755 "$root/headroom/bin/$name"
if [ -n "${HEADROOM_BOCHS_WORKDIR:-}" ]; then
	[ -d "$HEADROOM_BOCHS_WORKDIR" ] || die "HEADROOM_BOCHS_WORKDIR=$HEADROOM_BOCHS_WORKDIR is not a directory"
	cp -a "$HEADROOM_BOCHS_WORKDIR" "$root/headroom/work"
else
	mkdir -p "$root/headroom/work"
fi
{
	printf '%s\0' "/headroom/bin/$name"
	[ $# -eq 0 ] || printf '%s\0' "$@"
} >"$root/headroom/args"
: >"$root/headroom/env"
for kv in ${HEADROOM_BOCHS_ENV:-}; do printf '%s\0' "$kv" >>"$root/headroom/env"; done
if [ "${HEADROOM_BOCHS_DMESG:-0}" = 1 ]; then : >"$root/headroom/dmesg"; fi
# Uncompressed: the emulated CPU would spend longer inflating it than it
# takes to load.
(cd "$root" && find . -mindepth 1 | LC_ALL=C sort | cpio -o -H newc --owner=0:0 --quiet) >"$RUN/initrd"
rm -rf "$root"

# Kernel command line. Each item saves emulated time or fixes Bochs:
#  - console on COM1, nothing on it but emergencies and panics (loglevel=1);
#  - clearcpuid=xsaves,xsavec: Bochs 2.7 reports the standard, not the
#    compacted, XSAVE area size in CPUID.(EAX=0DH,ECX=1):EBX, so Linux would
#    find its compacted layout inconsistent and turn XSAVE - and with it AVX
#    and AVX-512 - off; without XSAVES/XSAVEC it uses the standard format;
#  - tsc_early_khz: Bochs' TSC counts one per instruction, ips per emulated
#    second, but the Skylake-X and later models' CPUID leaves 15H/16H claim
#    GHz, which Linux would believe: tell it the real rate, so that every
#    clock in the guest agrees;
#  - initcall_blacklist: boot-time work that takes emulated seconds and that
#    a test program does not need: ftrace's and tracefs' set-up, the vmlinux
#    BTF parse (TCP cubic, BPF kfunc sets), certificate and crypto self-tests;
#  - rodata=off skips the W+X page-table walk (CONFIG_DEBUG_WX) at the end of
#    boot; mitigations=off, audit=0, no watchdogs, one UART, no PS/2 probing.
BLACKLIST=trace_eval_init,ftrace_check_for_weak_functions,tracer_init_tracefs,dev_map_init
BLACKLIST=$BLACKLIST,cubictcp_register,bpf_prog_test_run_init,bpf_key_sig_kfuncs_init
BLACKLIST=$BLACKLIST,load_system_certificate_list,blake2s_mod_init
CMDLINE="console=ttyS0,115200 quiet loglevel=1 rdinit=/init mitigations=off
 clearcpuid=xsaves,xsavec,pku tsc_early_khz=$((IPS / 1000)) tsc=reliable
 initcall_blacklist=$BLACKLIST cryptomgr.notests rodata=off audit=0
 nowatchdog nmi_watchdog=0 8250.nr_uarts=1 i8042.noaux i8042.nokbd
 ${HEADROOM_BOCHS_APPEND:-}"
if [ "$VERBOSE" = 1 ]; then
	CMDLINE="${CMDLINE//quiet loglevel=1/loglevel=7}"
fi
CMDLINE=$(echo $CMDLINE)

if [ "$BOOT" = iso ]; then
	# The conventional way: ISOLINUX loads the bzImage, whose XZ decompressor
	# then runs inside the emulator.
	iso=$RUN/iso
	mkdir -p "$iso/isolinux"
	mv "$RUN/initrd" "$iso/initrd"
	cp /usr/lib/ISOLINUX/isolinux.bin /usr/lib/syslinux/modules/bios/ldlinux.c32 "$iso/isolinux/"
	ln "$KERNEL" "$iso/vmlinuz" 2>/dev/null || cp "$KERNEL" "$iso/vmlinuz"
	printf '%s\n' 'DEFAULT linux' 'PROMPT 0' 'TIMEOUT 0' 'LABEL linux' '  KERNEL /vmlinuz' \
		'  INITRD /initrd' "  APPEND nokaslr $CMDLINE" >"$iso/isolinux/isolinux.cfg"
	xorriso -as mkisofs -quiet -o "$RUN/boot.iso" -b isolinux/isolinux.bin -c isolinux/boot.cat \
		-no-emul-boot -boot-load-size 4 -boot-info-table -R "$iso" 2>"$RUN/xorriso.log" ||
		{ cat "$RUN/xorriso.log" >&2; die "xorriso failed"; }
	rm -rf "$iso"
	BOOTCFG="ata0: enabled=1, ioaddr1=0x1f0, ioaddr2=0x3f0, irq=14
ata0-master: type=cdrom, path=\"$RUN/boot.iso\", status=inserted
ata1: enabled=0
boot: cdrom"
else
	# Direct boot: a 1 KiB option ROM (boot/stub.s), run by the BIOS during
	# POST, reads boot_params, the uncompressed kernel and the initrd from a
	# raw disk image into RAM and jumps to the kernel's 64-bit entry point.
	BOOTCFG="$("$MKBOOT" -bzimage "$KERNEL" -kernel-out "$KIMG" -stub "$STUB" \
		-initrd "$RUN/initrd" -megs "$MEGS" -cmdline "$CMDLINE" -out "$RUN")" || die "mkboot failed"
	rm -f "$RUN/initrd"
	BOOTCFG="ata0: enabled=1, ioaddr1=0x1f0, ioaddr2=0x3f0, irq=14
$BOOTCFG
ata1: enabled=0
boot: disk"
fi

SERIAL=$RUN/serial.out
: >"$SERIAL"
cat >"$RUN/bochsrc" <<EOF
megs: $MEGS
romimage: file=/usr/share/bochs/BIOS-bochs-latest
vgaromimage: file=/usr/share/vgabios/vgabios.bin
cpu: model=$CPU_MODEL, count=1, ips=$IPS, reset_on_triple_fault=0
clock: sync=none, time0=local
display_library: term
speaker: enabled=0
pci: enabled=1, chipset=i440fx
$BOOTCFG
com1: enabled=1, mode=file, dev="$SERIAL"
log: $RUN/bochs.log
panic: action=fatal
error: action=report
info: action=report
debug: action=ignore
EOF
# Debian's Bochs is built with its debugger, which stops before the first
# instruction: the rc file tells it to continue.
echo continue >"$RUN/debug.rc"

# ---- run -------------------------------------------------------------------
start=$(date +%s.%N)
elapsed() { awk -v a="$start" -v b="$(date +%s.%N)" 'BEGIN{printf "%.1f", b-a}'; }
TERM=dumb setsid bochs-bin -q -f "$RUN/bochsrc" -rc "$RUN/debug.rc" >"$RUN/bochs.out" 2>&1 </dev/null &
BPID=$!
disown "$BPID" # no "Killed" notice from bash when it is stopped
(
	sleep "$TIMEOUT" &
	spid=$!
	trap 'kill $spid; exit 0' TERM
	wait $spid
	: >"$RUN/timed-out"
	kill -KILL "$BPID"
) >/dev/null 2>&1 &
WPID=$!

status=
started=0
failure=
while IFS= read -r line || [ -n "$line" ]; do
	line=${line%$'\r'}
	case $line in
	"Kernel panic - not syncing"* | *"] Kernel panic - not syncing"* | HRBOOT-ERROR*)
		printf '%s\n' "$line" >&2
		failure="the guest failed: $line"
		break
		;;
	esac
	if [ $started = 0 ]; then
		if [ "$line" = HEADROOM-BOCHS-START ]; then
			started=1
			echo "run.sh: booted in $(elapsed)s ($CPU_MODEL); running $name" >&2
		elif [ "$VERBOSE" = 1 ]; then
			printf '%s\n' "$line" >&2
		fi
		continue
	fi
	case $line in
	"HEADROOM-BOCHS-EXIT "*)
		status=${line#HEADROOM-BOCHS-EXIT }
		break
		;;
	esac
	printf '%s\n' "$line"
done < <(tail -c +1 -F --pid="$BPID" "$SERIAL" 2>/dev/null)

if [ -n "$status" ]; then
	# The guest switches Bochs off itself; give it a moment.
	for _ in 1 2 3 4 5 6 7 8 9 10; do
		kill -0 "$BPID" 2>/dev/null || break
		sleep 0.2
	done
	echo "run.sh: $name exited with status $status after $(elapsed)s in Bochs" >&2
	case $status in
	'' | *[!0-9]*) exit 125 ;;
	esac
	exit "$status"
fi

if [ -n "$failure" ]; then
	sleep 1 # let the rest of the report reach the serial file
fi
stop_bochs
if [ -n "$failure" ]; then
	echo "run.sh: $failure" >&2
elif [ -e "$RUN/timed-out" ]; then
	echo "run.sh: timed out after ${TIMEOUT}s (HEADROOM_BOCHS_TIMEOUT)" >&2
else
	echo "run.sh: bochs stopped after $(elapsed)s" >&2
fi
if [ "$started" = 0 ]; then
	echo "run.sh: the guest never started $name (no HEADROOM-BOCHS-START on the serial console)" >&2
else
	echo "run.sh: $name did not finish (no HEADROOM-BOCHS-EXIT line on the serial console)" >&2
fi
echo "run.sh: --- last lines of the serial console ---" >&2
tail -n 30 "$SERIAL" | tr -d '\r' >&2 || true
echo "run.sh: --- last lines of the Bochs log ---" >&2
grep -v '^[0-9]*i\[CPU0  \] |' "$RUN/bochs.log" 2>/dev/null | tail -n 12 >&2 || tail -n 12 "$RUN/bochs.out" >&2 || true
echo "run.sh: rerun with HEADROOM_BOCHS_VERBOSE=1 HEADROOM_BOCHS_KEEP=1 to see the boot" >&2
exit 124
