//go:build ignore

// Command mkboot lays out what scripts/bochs/run.sh boots in Bochs, so that
// Linux starts without a boot loader and without running the bzImage's
// decompressor inside the emulator:
//
//	kernel: the uncompressed vmlinux (ELF) flattened at its physical load
//	        address (16 MiB), trailing zeros (.bss) dropped; made once and
//	        cached at -kernel-out;
//	disk:   a raw hard-disk image (-out/boot.img) holding boot_params with
//	        the command line, the kernel and the initrd;
//	rom:    stub.s assembled (-stub) with its parameter block and checksum
//	        filled in: an option ROM that the BIOS runs during POST, which
//	        reads the three regions into RAM (ATA PIO) and jumps to the
//	        kernel's 64-bit entry point.
//
// It prints the bochsrc lines for the ROM and the disk. Built by run.sh:
//
//	CGO_ENABLED=0 go build -o mkboot scripts/bochs/boot/main.go
package main

import (
	"bytes"
	"debug/elf"
	"encoding/binary"
	"flag"
	"fmt"
	"log"
	"os"
	"os/exec"
	"path/filepath"
)

const (
	romBase      = 0xd0000
	zeroPageAddr = 0x800000 // 8 MiB: below the kernel, above all the BIOS uses
	cmdlineOff   = 0x1000   // command line after the 4 KiB zero page
	zeroPageLen  = 0x2000
	mib          = 1 << 20
)

func main() {
	log.SetFlags(0)
	log.SetPrefix("mkboot: ")
	bzImage := flag.String("bzimage", "", "the kernel as the distribution ships it (vmlinuz)")
	kernelOut := flag.String("kernel-out", "", "cache file for the flattened kernel (made if missing)")
	stub := flag.String("stub", "", "the assembled boot stub (1 KiB)")
	initrd := flag.String("initrd", "", "the initramfs")
	megs := flag.Int("megs", 512, "guest memory in MiB")
	cmdline := flag.String("cmdline", "", "kernel command line")
	out := flag.String("out", "", "directory for the disk image and the ROM")
	flag.Parse()
	if *bzImage == "" || *kernelOut == "" || *stub == "" || *initrd == "" || *out == "" {
		flag.Usage()
		os.Exit(2)
	}

	bz, err := os.ReadFile(*bzImage)
	check(err)
	if len(bz) < 0x270 || string(bz[0x202:0x206]) != "HdrS" {
		log.Fatalf("%s: not a bzImage (no HdrS setup header)", *bzImage)
	}
	if v := binary.LittleEndian.Uint16(bz[0x206:]); v < 0x20c {
		log.Fatalf("%s: boot protocol %#x, want at least 2.12 (64-bit entry)", *bzImage, v)
	}

	// The flattened kernel and its entry point, cached beside -kernel-out.
	if _, err := os.Stat(*kernelOut); err != nil {
		check(flatten(bz, *kernelOut))
	}
	info, err := os.ReadFile(*kernelOut + ".info")
	check(err)
	var loadAddr, entry, end uint64
	if _, err := fmt.Sscan(string(info), &loadAddr, &entry, &end); err != nil {
		log.Fatalf("%s.info: %v", *kernelOut, err)
	}

	// The initrd goes as high as it can, below the ACPI tables that the
	// BIOS puts in the last 64 KiB of RAM.
	ird, err := os.ReadFile(*initrd)
	check(err)
	ramEnd := uint64(*megs) * mib
	initrdAddr := (ramEnd - mib - uint64(len(ird))) &^ 0xfff
	if ramEnd < mib+uint64(len(ird)) || initrdAddr < end {
		log.Fatalf("initrd (%d MiB) does not fit in %d MiB above the kernel (ends at %d MiB): raise HEADROOM_BOCHS_MEGS",
			len(ird)/mib, *megs, end/mib)
	}
	le := binary.LittleEndian
	if max := uint64(le.Uint32(bz[0x22c:])); initrdAddr+uint64(len(ird)) > max+1 {
		log.Fatalf("initrd would end above initrd_addr_max %#x", max)
	}

	// boot_params: the bzImage's setup header, then what a boot loader sets.
	if max := le.Uint32(bz[0x238:]); max != 0 && len(*cmdline) >= int(max) {
		log.Fatalf("command line longer than the kernel's %d bytes", max)
	}
	if len(*cmdline) >= zeroPageLen-cmdlineOff {
		log.Fatalf("command line too long")
	}
	zp := make([]byte, zeroPageLen)
	hdrEnd := 0x202 + int(bz[0x201])
	copy(zp[0x1f1:hdrEnd], bz[0x1f1:hdrEnd])
	zp[0x210] = 0xff                             // type_of_loader: undefined
	zp[0x211] |= 0x01                            // loadflags: LOADED_HIGH
	le.PutUint32(zp[0x218:], uint32(initrdAddr)) // ramdisk_image
	le.PutUint32(zp[0x21c:], uint32(len(ird)))   // ramdisk_size
	le.PutUint32(zp[0x228:], zeroPageAddr+cmdlineOff)
	copy(zp[cmdlineOff:], *cmdline)

	// The disk: zero page, kernel, initrd, each from a sector boundary,
	// padded to whole cylinders of 16 heads x 63 sectors.
	kern, err := os.ReadFile(*kernelOut)
	check(err)
	type region struct {
		data []byte
		dest uint64
	}
	regions := []region{{zp, zeroPageAddr}, {kern, loadAddr}, {ird, initrdAddr}}
	imgPath := filepath.Join(*out, "boot.img")
	img, err := os.Create(imgPath)
	check(err)
	rom, err := os.ReadFile(*stub)
	check(err)
	if len(rom) != 1024 || rom[0] != 0x55 || rom[1] != 0xaa || string(rom[20:28]) != "HRBOOT03" {
		log.Fatalf("%s: not the boot stub", *stub)
	}
	le.PutUint64(rom[8:], entry)
	le.PutUint32(rom[16:], zeroPageAddr)
	var lba uint64
	for i, r := range regions {
		sectors := (uint64(len(r.data)) + 511) / 512
		le.PutUint32(rom[28+12*i:], uint32(lba))
		le.PutUint32(rom[32+12*i:], uint32(sectors))
		le.PutUint32(rom[36+12*i:], uint32(r.dest))
		_, err := img.Write(r.data)
		check(err)
		_, err = img.Write(make([]byte, sectors*512-uint64(len(r.data))))
		check(err)
		lba += sectors
	}
	const cyl = 16 * 63
	cyls := (lba + cyl - 1) / cyl
	check(img.Truncate(int64(cyls * cyl * 512)))
	check(img.Close())

	rom[len(rom)-1] = 0
	var sum byte
	for _, b := range rom {
		sum += b
	}
	rom[len(rom)-1] = -sum
	romPath := filepath.Join(*out, "stub.rom")
	check(os.WriteFile(romPath, rom, 0o644))

	fmt.Printf("optromimage1: file=%q, address=%#x\n", romPath, romBase)
	fmt.Printf("ata0-master: type=disk, path=%q, mode=flat, cylinders=%d, heads=16, spt=63\n", imgPath, cyls)
}

// flatten decompresses the bzImage's payload (XZ, as Debian builds it) and
// writes the vmlinux's loadable segments as one image starting at the
// lowest physical address, plus "load entry end" to out+".info".
func flatten(bz []byte, out string) error {
	setupSects := int(bz[0x1f1])
	if setupSects == 0 {
		setupSects = 4
	}
	pmOff := (setupSects + 1) * 512
	payOff := pmOff + int(binary.LittleEndian.Uint32(bz[0x248:]))
	payLen := int(binary.LittleEndian.Uint32(bz[0x24c:]))
	if payOff+payLen > len(bz) {
		return fmt.Errorf("payload out of range")
	}
	payload := bz[payOff : payOff+payLen]
	var cmd *exec.Cmd
	switch {
	case bytes.HasPrefix(payload, []byte("\xfd7zXZ\x00")):
		cmd = exec.Command("xz", "-dc", "--single-stream")
	case bytes.HasPrefix(payload, []byte{0x1f, 0x8b}):
		cmd = exec.Command("gzip", "-dc")
	case bytes.HasPrefix(payload, []byte{0x28, 0xb5, 0x2f, 0xfd}):
		cmd = exec.Command("zstd", "-dc")
	default:
		return fmt.Errorf("unknown kernel compression (payload starts % x)", payload[:6])
	}
	cmd.Stdin = bytes.NewReader(payload)
	cmd.Stderr = os.Stderr
	vmlinux, err := cmd.Output()
	if err != nil && len(vmlinux) == 0 {
		return fmt.Errorf("decompressing the kernel: %v", err)
	}
	f, err := elf.NewFile(bytes.NewReader(vmlinux))
	if err != nil {
		return fmt.Errorf("decompressed kernel: %v", err)
	}
	var lo, hi, end uint64 = ^uint64(0), 0, 0
	var entry uint64
	for _, p := range f.Progs {
		if p.Type != elf.PT_LOAD {
			continue
		}
		lo = min(lo, p.Paddr)
		hi = max(hi, p.Paddr+p.Filesz)
		end = max(end, p.Paddr+p.Memsz)
		// Linux's vmlinux gives the physical entry (phys_startup_64);
		// accept a virtual one too.
		if f.Entry >= p.Paddr && f.Entry < p.Paddr+p.Memsz {
			entry = f.Entry
		} else if f.Entry >= p.Vaddr && f.Entry < p.Vaddr+p.Memsz {
			entry = p.Paddr + (f.Entry - p.Vaddr)
		}
	}
	if entry == 0 || lo == ^uint64(0) {
		return fmt.Errorf("vmlinux: no loadable segment holds the entry point %#x", f.Entry)
	}
	img := make([]byte, hi-lo)
	for _, p := range f.Progs {
		if p.Type != elf.PT_LOAD || p.Filesz == 0 {
			continue
		}
		if _, err := p.ReadAt(img[p.Paddr-lo:p.Paddr-lo+p.Filesz], 0); err != nil {
			return fmt.Errorf("vmlinux segment at %#x: %v", p.Paddr, err)
		}
	}
	// What is left is .bss and friends: zero, as the guest's RAM starts.
	img = bytes.TrimRight(img, "\x00")
	tmp := out + ".tmp"
	if err := os.WriteFile(tmp, img, 0o644); err != nil {
		return err
	}
	if err := os.WriteFile(out+".info", []byte(fmt.Sprintf("%d %d %d\n", lo, entry, end)), 0o644); err != nil {
		return err
	}
	return os.Rename(tmp, out)
}

func check(err error) {
	if err != nil {
		log.Fatal(err)
	}
}
