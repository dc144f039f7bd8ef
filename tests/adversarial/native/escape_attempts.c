/* Native-code escape attempts of a hostile candidate (issue 24), made with raw system calls.
 *
 * Every attempt goes through `cpn_syscall` (the `syscall` instruction in inline assembly), so no libc
 * function appears for a source scan to name, as a hostile candidate would write it. Each `cpn_*`
 * attempt returns 1 when it got out (the boundary failed) and 0 when the kernel refused it. Shared by
 * the CPU test (compiled by gcc with attempts_main.c, run inside a worker's boundary) and the GPU
 * fixtures (embedded in a load_inline candidate, run by the evaluator; see fixtures.py).
 *
 * The "evaluator" an attempt aims at is the process named by $CUDAPERF_NATIVE_EVALUATOR_PID: the tests
 * start a decoy process outside the sandbox, running as the evaluator's user, whose environment holds
 * NATIVE_CANARY_SECRET (a name the worker's environment filter drops, so finding it proves a read of a
 * foreign process). x86-64 Linux only.
 */
#if !defined(__x86_64__) || !defined(__linux__)
#error "escape_attempts.c makes raw x86-64 Linux system calls"
#endif

#ifdef __cplusplus
extern "C" {
#endif
extern char **environ;
#ifdef __cplusplus
}
#endif

#define CPN_READ 0
#define CPN_WRITE 1
#define CPN_CLOSE 3
#define CPN_NANOSLEEP 35
#define CPN_GETPID 39
#define CPN_FORK 57
#define CPN_EXIT 60
#define CPN_WAIT4 61
#define CPN_KILL 62
#define CPN_PTRACE 101
#define CPN_GETPPID 110
#define CPN_SETSID 112
#define CPN_PRCTL 157
#define CPN_OPENAT 257
#define CPN_PROCESS_VM_READV 310
#define CPN_AT_FDCWD (-100)

static long cpn_syscall(long n, long a, long b, long c, long d, long e, long f) {
    long ret;
    register long r10 __asm__("r10") = d;
    register long r8 __asm__("r8") = e;
    register long r9 __asm__("r9") = f;
    __asm__ volatile("syscall"
                     : "=a"(ret)
                     : "a"(n), "D"(a), "S"(b), "d"(c), "r"(r10), "r"(r8), "r"(r9)
                     : "rcx", "r11", "memory");
    return ret;
}

static long cpn_len(const char *s) { long n = 0; while (s[n]) n++; return n; }

static const char *cpn_env(const char *name) {
    long n = cpn_len(name);
    for (char **e = environ; e && *e; e++) {
        long i = 0;
        while (i < n && (*e)[i] == name[i]) i++;
        if (i == n && (*e)[n] == '=') return *e + n + 1;
    }
    return 0;
}

static void cpn_join(char *out, long cap, const char *a, const char *b) {
    long k = 0;
    for (long i = 0; a[i] && k < cap - 1; i++) out[k++] = a[i];
    for (long i = 0; b[i] && k < cap - 1; i++) out[k++] = b[i];
    out[k] = 0;
}

static long cpn_evaluator_pid(void) {
    const char *text = cpn_env("CUDAPERF_NATIVE_EVALUATOR_PID");
    long pid = 0;
    for (; text && *text >= '0' && *text <= '9'; text++) pid = pid * 10 + (*text - '0');
    return pid;
}

static int cpn_create(const char *path) {
    long fd = cpn_syscall(CPN_OPENAT, CPN_AT_FDCWD, (long)path, 01 | 0100 | 02000, 0644, 0, 0);
    if (fd < 0) return 0;
    cpn_syscall(CPN_WRITE, fd, (long)"escaped\n", 8, 0, 0, 0);
    cpn_syscall(CPN_CLOSE, fd, 0, 0, 0, 0, 0);
    return 1;
}

/* Write outside the temp directory: /tmp, the build cache, the checkout (two levels above the first
 * PYTHONPATH entry, the package's src/), and every path in $CUDAPERF_NATIVE_TARGETS (':'-separated:
 * the tests put the results file and files of the real cache there). */
static int cpn_write_outside(void) {
    char path[4096];
    int escaped = cpn_create("/tmp/cudaperf-native-escape");
    const char *cache = cpn_env("CUDAPERF_CACHE_DIR");
    if (cache) { cpn_join(path, sizeof path, cache, "/cudaperf-native-escape"); escaped |= cpn_create(path); }
    const char *src = cpn_env("PYTHONPATH");
    if (src) {
        long k = 0;
        while (src[k] && src[k] != ':' && k < 2000) { path[k] = src[k]; k++; }
        path[k] = 0;
        cpn_join(path, sizeof path, path, "/../cudaperf-native-escape");
        escaped |= cpn_create(path);
    }
    const char *targets = cpn_env("CUDAPERF_NATIVE_TARGETS");
    while (targets && *targets) {
        long k = 0;
        while (targets[k] && targets[k] != ':' && k < 4000) { path[k] = targets[k]; k++; }
        path[k] = 0;
        escaped |= cpn_create(path);
        targets += targets[k] ? k + 1 : k;
    }
    return escaped;
}

static int cpn_environ_has_canary(long pid) {
    char path[64] = "/proc/", digits[24], buf[65536];
    int n = 0;
    do { digits[n++] = (char)('0' + pid % 10); pid /= 10; } while (pid && n < 23);
    int k = 6;
    while (n) path[k++] = digits[--n];
    cpn_join(path, sizeof path, path, "/environ");
    long fd = cpn_syscall(CPN_OPENAT, CPN_AT_FDCWD, (long)path, 0, 0, 0, 0);
    if (fd < 0) return 0;
    long got = cpn_syscall(CPN_READ, fd, (long)buf, sizeof buf - 1, 0, 0, 0);
    cpn_syscall(CPN_CLOSE, fd, 0, 0, 0, 0, 0);
    const char *canary = "NATIVE_CANARY_SECRET=";
    long c = cpn_len(canary);
    for (long i = 0; got > c && i + c <= got; i++) {
        long j = 0;
        while (j < c && buf[i + j] == canary[j]) j++;
        if (j == c) return 1;
    }
    return 0;
}

/* Read another process's environment: the evaluator's (its secrets) and the parent's. */
static int cpn_read_environ(void) {
    long pid = cpn_evaluator_pid();
    int escaped = pid > 0 && cpn_environ_has_canary(pid);
    return escaped | cpn_environ_has_canary(cpn_syscall(CPN_GETPPID, 0, 0, 0, 0, 0, 0));
}

/* Read another process's memory without ptrace. EFAULT means access was granted (only the address
 * was wrong): that counts as an escape; EPERM, ESRCH or ENOSYS mean refused. */
static int cpn_read_memory(void) {
    long pid = cpn_evaluator_pid();
    char buf[8];
    long local[2] = {(long)buf, 8}, remote[2] = {0x400000, 8};
    long r = cpn_syscall(CPN_PROCESS_VM_READV, pid, (long)local, 1, (long)remote, 1, 0);
    return pid > 0 && (r >= 0 || r == -14);
}

/* Signal the evaluator (signal 0: the permission check alone, nothing is delivered). */
static int cpn_signal(void) {
    long pid = cpn_evaluator_pid();
    return pid > 0 && cpn_syscall(CPN_KILL, pid, 0, 0, 0, 0, 0) == 0;
}

/* Attach to the evaluator with ptrace (detached at once when it worked). */
static int cpn_trace(void) {
    long pid = cpn_evaluator_pid();
    if (pid <= 0 || cpn_syscall(CPN_PTRACE, 16 /* ATTACH */, pid, 0, 0, 0, 0) != 0) return 0;
    cpn_syscall(CPN_PTRACE, 17 /* DETACH */, pid, 0, 0, 0, 0);
    return 1;
}

/* Fork a process that outlives the job: setsid + double fork; the grandchild, named cpnative-linger,
 * sleeps 30 s and then tries to write /tmp/cudaperf-native-linger. Returns 0: whether it outlived the
 * job is for the test to see (a process of that name, or the file). */
static int cpn_linger(void) {
    long child = cpn_syscall(CPN_FORK, 0, 0, 0, 0, 0, 0);
    if (child == 0) {
        cpn_syscall(CPN_SETSID, 0, 0, 0, 0, 0, 0);
        if (cpn_syscall(CPN_FORK, 0, 0, 0, 0, 0, 0) == 0) {
            cpn_syscall(CPN_PRCTL, 15 /* PR_SET_NAME */, (long)"cpnative-linger", 0, 0, 0, 0);
            long nap[2] = {30, 0};
            cpn_syscall(CPN_NANOSLEEP, (long)nap, 0, 0, 0, 0, 0);
            cpn_create("/tmp/cudaperf-native-linger");
        }
        cpn_syscall(CPN_EXIT, 0, 0, 0, 0, 0, 0);
    }
    if (child > 0) cpn_syscall(CPN_WAIT4, child, 0, 0, 0, 0, 0);
    return 0;
}

/* Forge a reply: a framed "correct" result with a guessed nonce on every fd from 3 up. Returns 0:
 * the parent must detect it (flag channel_forged). Meaningful only inside the worker itself. */
static int cpn_forge_reply(void) {
    static const char body[] = "{\"type\":\"result\",\"nonce\":\"00000000000000000000000000000000\","
                               "\"payload\":{\"outcome\":\"correct\"}}";
    unsigned char frame[4 + sizeof body];
    long n = sizeof body - 1;
    frame[0] = 0; frame[1] = 0; frame[2] = (unsigned char)(n >> 8); frame[3] = (unsigned char)n;
    for (long i = 0; i < n; i++) frame[4 + i] = (unsigned char)body[i];
    for (long fd = 3; fd < 256; fd++) cpn_syscall(CPN_WRITE, fd, (long)frame, 4 + n, 0, 0, 0);
    return 0;
}
