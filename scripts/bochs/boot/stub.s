/*
 * Boot stub for scripts/bochs/run.sh: an x86 option ROM that the Bochs BIOS
 * runs during POST (bochsrc: optromimage1 at 0xd0000). It never returns: it
 * boots an uncompressed Linux kernel through the kernel's 64-bit boot
 * protocol, so that the emulated CPU never runs the bzImage's XZ
 * decompressor (which takes Bochs about 100 s) and the BIOS never looks for
 * a boot device.
 *
 *  1. real mode: collect the BIOS memory map (int 15h, E820) at 0x60000;
 *  2. 32-bit protected mode: read three regions of the primary ATA master
 *     (a raw image that mkboot wrote) straight to their places in RAM with
 *     PIO (READ SECTORS, rep insl): boot_params with the command line, the
 *     flattened kernel at 16 MiB and the initrd; copy the memory map into
 *     boot_params; build page tables at 0x70000 that identity-map the first
 *     4 GiB with 2 MiB pages;
 *  3. long mode: jump to the kernel's startup_64 with %rsi = boot_params,
 *     CS = 0x10 and DS = SS = 0x18 (the protocol's __BOOT_CS/__BOOT_DS).
 *
 * (Bochs' optramimage cannot preload the kernel instead: Bochs 2.7 reads a
 * RAM image into host memory as if guest RAM were contiguous there, but it
 * hands out its 128 KiB host blocks in the order the guest first touches
 * them, so any image over 128 KiB comes out scrambled. Reading through the
 * BIOS (int 13h into a buffer, int 15h AH=87h up) works but takes 3 s.)
 *
 * On a disk error it prints "HRBOOT-ERROR ..." on COM1 and asks Bochs to
 * quit (port 0x8900).
 *
 * Assembled with GNU as (as --64; ld -Ttext=0; objcopy -O binary); mkboot
 * (main.go beside this file) fills in the parameter block and the checksum.
 */
	.equ ROM_BASE, 0xd0000      /* bochsrc: optromimage1 address */
	.equ E820_BUF, 0x60000      /* u32 count, then 20-byte entries */
	.equ E820_MAX, 128
	.equ PT_BASE, 0x70000       /* PML4, PDPT, 4 x PD */
	.equ NSEGS, 3
	.equ ATA_DATA, 0x1f0        /* primary channel command block */
	.equ ATA_CTRL, 0x3f6        /* device control / alternate status */

	.code16
	.text
	.globl _start
_start:
	.byte 0x55, 0xaa
	.byte 2                     /* ROM size in 512-byte blocks */
	jmp init                    /* offset 3: the BIOS far-calls here */

	.org 8
/* Parameter block, filled in by mkboot (offsets are fixed). */
param_entry:    .quad 0         /* 8:  physical address of startup_64 */
param_zeropage: .long 0         /* 16: physical address of boot_params */
param_magic:    .ascii "HRBOOT03" /* 20: mkboot checks it */
param_segs:                     /* 28: NSEGS x {lba, sectors, dest} (u32) */
	.fill NSEGS * 3, 4, 0

	.p2align 3
gdt:
	.quad 0
	.quad 0x00cf9a000000ffff    /* 0x08: 32-bit code, flat */
	.quad 0x00af9a000000ffff    /* 0x10: 64-bit code (__BOOT_CS) */
	.quad 0x00cf92000000ffff    /* 0x18: data, flat (__BOOT_DS) */
gdt_end:
gdt_desc:
	.word gdt_end - gdt - 1
	.long ROM_BASE + gdt

msg_disk:  .asciz "HRBOOT-ERROR disk read failed\n"
msg_quit:  .ascii "Shutdown"

init:
	cli
	cld
	/* Fast A20. */
	inb $0x92, %al
	orb $2, %al
	andb $0xfe, %al
	outb %al, $0x92

	/* E820 memory map into E820_BUF. */
	movw $(E820_BUF >> 4), %ax
	movw %ax, %es
	movw $4, %di
	xorl %ebx, %ebx
	xorl %esi, %esi             /* entry count */
1:
	movl $0xe820, %eax
	movl $0x534d4150, %edx      /* "SMAP" */
	movl $20, %ecx
	int $0x15
	jc 2f
	cmpl $0x534d4150, %eax
	jne 2f
	incl %esi
	addw $20, %di
	cmpl $E820_MAX, %esi
	jae 2f
	testl %ebx, %ebx
	jnz 1b
2:
	movl %esi, %es:0

	/* Protected mode. */
	cli
	movw %cs, %ax
	movw %ax, %ds
	lgdtl gdt_desc
	movl %cr0, %eax
	orl $1, %eax
	movl %eax, %cr0
	ljmpl $0x08, $(ROM_BASE + pm32)

	.code32
pm32:
	movw $0x18, %ax
	movw %ax, %ds
	movw %ax, %es
	movw %ax, %ss
	movw %ax, %fs
	movw %ax, %gs
	movl $0x7f000, %esp
	cld

	/* Load the regions: no interrupts (nIEN), LBA28, up to 256 sectors per
	 * READ SECTORS command, each sector read with rep insl. */
	movw $ATA_CTRL, %dx
	movb $0x02, %al
	outb %al, %dx
	movl $(ROM_BASE + param_segs), %esi
	movl $NSEGS, %ebp
region:
	movl (%esi), %ebx           /* LBA */
	movl 4(%esi), %ecx          /* sectors */
	movl 8(%esi), %edi          /* destination */
	pushl %esi
chunk:
	testl %ecx, %ecx
	jz region_done
	movl %ecx, %esi
	cmpl $256, %esi
	jbe 1f
	movl $256, %esi             /* %esi: sectors in this command */
1:
	call ata_wait_ready
	movw $(ATA_DATA + 6), %dx   /* drive/head: master, LBA, bits 27:24 */
	movl %ebx, %eax
	shrl $24, %eax
	andb $0x0f, %al
	orb $0xe0, %al
	outb %al, %dx
	movw $(ATA_DATA + 2), %dx   /* sector count (0 = 256) */
	movl %esi, %eax
	outb %al, %dx
	incw %dx                    /* LBA 7:0, 15:8, 23:16 */
	movl %ebx, %eax
	outb %al, %dx
	incw %dx
	shrl $8, %eax
	outb %al, %dx
	incw %dx
	shrl $8, %eax
	outb %al, %dx
	movw $(ATA_DATA + 7), %dx
	movb $0x20, %al             /* READ SECTORS */
	outb %al, %dx
	addl %esi, %ebx
	subl %esi, %ecx
	pushl %ecx
2:
	call ata_wait_drq
	movw $ATA_DATA, %dx
	movl $128, %ecx
	rep insl
	decl %esi
	jnz 2b
	popl %ecx
	jmp chunk
region_done:
	popl %esi
	addl $12, %esi
	decl %ebp
	jnz region

	/* boot_params.e820_entries (0x1e8) and e820_table (0x2d0). */
	movl (ROM_BASE + param_zeropage), %edx
	movl (E820_BUF), %ecx
	movb %cl, 0x1e8(%edx)
	imull $20, %ecx, %ecx
	movl $(E820_BUF + 4), %esi
	leal 0x2d0(%edx), %edi
	rep movsb

	/* Page tables: clear 6 pages, then link PML4 -> PDPT -> 4 PDs. */
	movl $PT_BASE, %edi
	xorl %eax, %eax
	movl $(6 * 4096 / 4), %ecx
	rep stosl
	movl $(PT_BASE + 0x1000 + 3), (PT_BASE)
	movl $(PT_BASE + 0x2000 + 3), %eax
	movl $(PT_BASE + 0x1000), %edi
	movl $4, %ecx
1:
	movl %eax, (%edi)
	addl $0x1000, %eax
	addl $8, %edi
	loop 1b
	/* 2048 PD entries: 2 MiB pages, present + writable + PS. */
	movl $(PT_BASE + 0x2000), %edi
	movl $0x83, %eax
	xorl %edx, %edx             /* high half of the physical address */
	movl $2048, %ecx
2:
	movl %eax, (%edi)
	movl %edx, 4(%edi)
	addl $0x200000, %eax
	adcl $0, %edx
	addl $8, %edi
	loop 2b

	movl $PT_BASE, %eax
	movl %eax, %cr3
	movl %cr4, %eax
	orl $0x20, %eax             /* PAE */
	movl %eax, %cr4
	movl $0xc0000080, %ecx      /* EFER */
	rdmsr
	orl $0x100, %eax            /* LME */
	wrmsr
	movl %cr0, %eax
	orl $0x80000001, %eax       /* PG | PE */
	movl %eax, %cr0
	ljmpl $0x10, $(ROM_BASE + lm64)

ata_wait_ready:                 /* wait until not busy */
	movw $(ATA_DATA + 7), %dx
1:
	inb %dx, %al
	testb $0x80, %al
	jnz 1b
	ret

ata_wait_drq:                   /* wait for data, or fail on error */
	movw $(ATA_DATA + 7), %dx
1:
	inb %dx, %al
	testb $0x80, %al
	jnz 1b
	testb $0x21, %al            /* ERR or device fault */
	jnz disk_error
	testb $0x08, %al
	jz 1b
	ret

disk_error:
	movl $(ROM_BASE + msg_disk), %esi
3:
	lodsb
	testb %al, %al
	jz 5f
	movb %al, %ah
	movw $0x3fd, %dx            /* COM1 line status: wait for THRE */
4:
	inb %dx, %al
	testb $0x20, %al
	jz 4b
	movw $0x3f8, %dx
	movb %ah, %al
	outb %al, %dx
	jmp 3b
5:
	movl $(ROM_BASE + msg_quit), %esi
	movl $8, %ecx
	movw $0x8900, %dx
6:
	lodsb
	outb %al, %dx
	loop 6b
7:
	cli
	hlt
	jmp 7b

	.code64
lm64:
	movw $0x18, %ax
	movw %ax, %ds
	movw %ax, %es
	movw %ax, %ss
	movw %ax, %fs
	movw %ax, %gs
	movl $0x7f000, %esp
	movl (ROM_BASE + param_zeropage), %esi
	movq (ROM_BASE + param_entry), %rax
	xorl %ebx, %ebx
	xorl %ebp, %ebp
	xorl %edi, %edi
	jmp *%rax

	.org 1023
checksum:
	.byte 0
