/* Programs built on a new glibc reference __libc_start_main@GLIBC_2.34 from crt1.o and then
 * refuse to start in containers with an older glibc (Ubuntu 20.04, Debian 11...). NVIDIA's
 * binaries run there, so ours must too: link with -nostartfiles and use this _start (glibc's
 * own x86_64 start.S), bound to the GLIBC_2.2.5 version of __libc_start_main. */
#ifndef OLDGLIBC_H
#define OLDGLIBC_H
#if defined(__x86_64__) && defined(SIM_OWN_START)
__asm__(".text\n"
        ".globl _start\n"
        ".type _start,@function\n"
        "_start:\n"
        "    xorl %ebp, %ebp\n"
        "    movq %rdx, %r9\n" /* rtld_fini */
        "    popq %rsi\n"      /* argc */
        "    movq %rsp, %rdx\n" /* argv */
        "    andq $-16, %rsp\n"
        "    pushq %rax\n"
        "    pushq %rsp\n" /* stack_end */
        "    xorl %r8d, %r8d\n"
        "    xorl %ecx, %ecx\n"
        "    movq main@GOTPCREL(%rip), %rdi\n"
        "    call *__libc_start_main@GOTPCREL(%rip)\n"
        "    hlt\n"
        ".symver __libc_start_main,__libc_start_main@GLIBC_2.2.5\n");
#endif
#endif
