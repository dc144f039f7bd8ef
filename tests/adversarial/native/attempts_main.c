/* The CPU tests' entry points, built by gcc: `cpn_attempt(name)` (loaded into a worker with ctypes, so the
 * attempt runs inside the worker process as a load_inline extension's static initialiser would) and a
 * `main` that runs the attempts named on its command line, printing `name=0|1` (for runs by hand). */
#include "escape_attempts.c"

static const struct { const char *name; int (*attempt)(void); } cpn_all[] = {
    {"write_outside", cpn_write_outside}, {"read_environ", cpn_read_environ},
    {"read_memory", cpn_read_memory}, {"signal", cpn_signal}, {"trace", cpn_trace},
    {"linger", cpn_linger}, {"forge_reply", cpn_forge_reply},
};

static int cpn_same(const char *a, const char *b) {
    long k = 0;
    while (a[k] && a[k] == b[k]) k++;
    return a[k] == b[k];
}

/* 1 escaped, 0 refused, -1 unknown name. */
int cpn_attempt(const char *name) {
    for (unsigned i = 0; i < sizeof cpn_all / sizeof cpn_all[0]; i++)
        if (cpn_same(name, cpn_all[i].name)) return cpn_all[i].attempt();
    return -1;
}

int main(int argc, char **argv) {
    for (int a = 1; a < argc; a++) {
        char line[128];
        int escaped = cpn_attempt(argv[a]);
        cpn_join(line, sizeof line, argv[a], escaped == 1 ? "=1\n" : escaped == 0 ? "=0\n" : "=?\n");
        cpn_syscall(CPN_WRITE, 1, (long)line, cpn_len(line), 0, 0, 0);
    }
    return 0;
}
