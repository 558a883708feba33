//go:build ignore

// Command init is PID 1 of the initramfs that scripts/bochs/run.sh boots in
// the Bochs emulator. It mounts /dev, /proc, /sys and /tmp, points its
// standard streams at the serial port, prints
//
//	HEADROOM-BOCHS-START
//
// runs the program named in /headroom/args (NUL-separated: path, then its
// arguments) in /headroom/work with the environment in /headroom/env
// (NUL-separated KEY=VALUE), prints
//
//	HEADROOM-BOCHS-EXIT <status>
//
// on a line of its own, waits for the serial port to drain and switches the
// machine off. run.sh waits for those lines. If /headroom/dmesg exists it
// first copies the kernel log to the console. It is built by run.sh, not by
// `go build ./...` (build tag ignore):
//
//	CGO_ENABLED=0 go build -o init scripts/bochs/init/main.go
package main

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"syscall"
	"unsafe"
)

const (
	startMarker = "HEADROOM-BOCHS-START"
	exitMarker  = "HEADROOM-BOCHS-EXIT"
)

func main() {
	mounts := []struct{ src, dir, fstype string }{
		{"devtmpfs", "/dev", "devtmpfs"},
		{"proc", "/proc", "proc"},
		{"sysfs", "/sys", "sysfs"},
		{"tmpfs", "/tmp", "tmpfs"},
	}
	var mountErrs []string
	for _, m := range mounts {
		os.MkdirAll(m.dir, 0o755)
		if err := syscall.Mount(m.src, m.dir, m.fstype, 0, ""); err != nil && err != syscall.EBUSY {
			mountErrs = append(mountErrs, fmt.Sprintf("mount %s: %v", m.dir, err))
		}
	}
	con := openConsole()
	os.Stdout, os.Stderr = con, con
	fmt.Fprintln(con, startMarker)
	for _, e := range mountErrs {
		fmt.Fprintln(con, "init:", e)
	}
	if _, err := os.Stat("/headroom/dmesg"); err == nil {
		printKernelLog(con)
	}
	status := run(con)
	fmt.Fprintf(con, "\n%s %d\n", exitMarker, status)
	// Let the UART send everything (tcdrain) before the power goes.
	const tcsbrk = 0x5409 // TCSBRK with a non-zero argument waits for the drain
	syscall.Syscall(syscall.SYS_IOCTL, con.Fd(), tcsbrk, 1)
	syscall.Sync()
	bochsShutdown()
	// Not Bochs, or /dev/port missing: ACPI power-off, else halt (run.sh
	// stops the emulator once it has seen the exit line).
	syscall.Reboot(syscall.LINUX_REBOOT_CMD_POWER_OFF)
	syscall.Reboot(syscall.LINUX_REBOOT_CMD_HALT)
	select {}
}

// bochsShutdown writes "Shutdown" to I/O port 0x8900, which makes Bochs quit
// at once.
func bochsShutdown() {
	f, err := os.OpenFile("/dev/port", os.O_WRONLY, 0)
	if err != nil {
		return
	}
	defer f.Close()
	for _, c := range []byte("Shutdown") {
		f.WriteAt([]byte{c}, 0x8900)
	}
}

// openConsole opens the serial port (falling back to /dev/console) and turns
// off output post-processing, so that "\n" reaches the host as "\n" rather
// than "\r\n".
func openConsole() *os.File {
	for _, p := range []string{"/dev/ttyS0", "/dev/console"} {
		f, err := os.OpenFile(p, os.O_RDWR|syscall.O_NOCTTY, 0)
		if err != nil {
			continue
		}
		var t syscall.Termios
		fd := f.Fd()
		if _, _, e := syscall.Syscall(syscall.SYS_IOCTL, fd, syscall.TCGETS, uintptr(unsafe.Pointer(&t))); e == 0 {
			t.Oflag &^= syscall.OPOST
			syscall.Syscall(syscall.SYS_IOCTL, fd, syscall.TCSETS, uintptr(unsafe.Pointer(&t)))
		}
		return f
	}
	return os.Stdout // the kernel's /dev/console, if it gave us one
}

// printKernelLog copies the kernel's log buffer (which "quiet" keeps off
// the slow serial console) to the console.
func printKernelLog(con *os.File) {
	const readAll, sizeBuffer = 3, 10
	n, err := syscall.Klogctl(sizeBuffer, nil)
	if err != nil || n <= 0 {
		n = 1 << 20
	}
	buf := make([]byte, n)
	n, err = syscall.Klogctl(readAll, buf)
	if err != nil {
		fmt.Fprintln(con, "init: reading the kernel log:", err)
		return
	}
	fmt.Fprintln(con, "--- kernel log ---")
	con.Write(buf[:n])
	fmt.Fprintln(con, "--- end of kernel log ---")
}

func readList(path string) []string {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil
	}
	var out []string
	for _, s := range bytes.Split(b, []byte{0}) {
		if len(s) > 0 {
			out = append(out, string(s))
		}
	}
	return out
}

func run(con *os.File) int {
	args := readList("/headroom/args")
	if len(args) == 0 {
		fmt.Fprintln(con, "init: /headroom/args is empty")
		return 125
	}
	env := append([]string{
		"PATH=/headroom/bin:/bin",
		"HOME=/tmp",
		"TMPDIR=/tmp",
		"HEADROOM_BOCHS=1",
	}, readList("/headroom/env")...)
	cmd := exec.Command(args[0], args[1:]...)
	cmd.Env = env
	cmd.Dir = "/headroom/work"
	cmd.Stdout, cmd.Stderr = con, con
	if devnull, err := os.Open("/dev/null"); err == nil {
		cmd.Stdin = devnull
	}
	err := cmd.Run()
	if err == nil {
		return 0
	}
	if ee, ok := err.(*exec.ExitError); ok {
		if ws, ok := ee.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
			fmt.Fprintf(con, "\ninit: %s killed by signal %d (%v)\n", args[0], int(ws.Signal()), ws.Signal())
			return 128 + int(ws.Signal())
		}
		return ee.ExitCode()
	}
	fmt.Fprintf(con, "init: %v\n", err)
	return 126
}
