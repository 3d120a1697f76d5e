/*
 * End-to-end check of the xperf hooks of the patch series, run as /init of a
 * patched kernel under QEMU (see run-qemu.sh).  Prints PASS/FAIL per check and
 * the u2k/k2u figures; TCG timings are emulated and only show consistency.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/mount.h>
#include <sys/prctl.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>
#include "xperf.h"	/* include/uapi/linux/xperf.h of the patched tree */

#define N 2000
#define SENT UINT64_MAX

static volatile struct xperf_page *xp;

static inline uint64_t open_stamp(void)
{
	uint32_t lo, hi;
	asm volatile("lfence; rdtsc; lfence" : "=a"(lo), "=d"(hi) :: "memory");
	return ((uint64_t)hi << 32) | lo;
}

static int cmp(const void *a, const void *b)
{
	uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
	return x < y ? -1 : x > y;
}

static void report(const char *what, uint64_t *v, int n)
{
	if (!n) { printf("  %s: no samples\n", what); return; }
	qsort(v, n, sizeof(*v), cmp);
	printf("  %s: n=%d min=%llu median=%llu p90=%llu max=%llu\n", what, n,
	       (unsigned long long)v[0], (unsigned long long)v[n / 2],
	       (unsigned long long)v[n * 9 / 10], (unsigned long long)v[n - 1]);
}

static uint64_t u2k[N], k2u[N];

/* One #PF: stamps around a store to an untouched page. */
static int pf_sample(char *p, uint64_t *a, uint64_t *b)
{
	uint32_t lo0, hi0, lo1, hi1, aux;
	uint64_t seq = xp->pf_seq, u, k;

	xp->pf_u2k_k = SENT;
	xp->pf_k2u_k = SENT;
	asm volatile("lfence; rdtsc; lfence\n\t"
		     "mov %%eax, %0\n\t"
		     "mov %%edx, %1\n\t"
		     "movb $1, (%6)\n\t"
		     "rdtscp\n\t"
		     "lfence\n\t"
		     : "=&r"(lo0), "=&r"(hi0), "=&a"(lo1), "=&d"(hi1), "=&c"(aux), "+m"(*p)
		     : "r"(p) : "memory");
	u = ((uint64_t)hi0 << 32) | lo0;
	k = ((uint64_t)hi1 << 32) | lo1;
	{
		/* snapshot first: storing the result may fault again */
		uint64_t uk = xp->pf_u2k_k, kk = xp->pf_k2u_k, s = xp->pf_seq;

		if (uk == SENT || kk == SENT || s != seq + 1)
			return -1;
		if (!(u < uk && uk < kk && kk < k))
			return -2;
		*a = uk - u;
		*b = k - kk;
	}
	return 0;
}

static int sc_sample(uint64_t *a, uint64_t *b, uint32_t *path)
{
	uint32_t lo0, hi0, lo1, hi1;
	uint64_t seq = xp->sc_seq, u, k;
	long nr = 110; /* getppid */

	xp->sc_u2k_k = SENT;
	xp->sc_k2u_k = SENT;
	xp->sc_ret_path = 7;
	asm volatile("lfence; rdtsc; lfence\n\t"
		     "mov %%eax, %0\n\t"
		     "mov %%edx, %1\n\t"
		     "mov %4, %%rax\n\t"
		     "syscall\n\t"
		     "rdtscp\n\t"
		     "lfence\n\t"
		     : "=&r"(lo0), "=&r"(hi0), "=&a"(lo1), "=&d"(hi1)
		     : "r"(nr) : "rcx", "r11", "memory");
	u = ((uint64_t)hi0 << 32) | lo0;
	k = ((uint64_t)hi1 << 32) | lo1;
	{
		uint64_t uk = xp->sc_u2k_k, kk = xp->sc_k2u_k, s = xp->sc_seq;
		uint32_t rp = xp->sc_ret_path;

		if (uk == SENT || kk == SENT || s != seq + 1)
			return -1;
		if (!(u < uk && uk < kk && kk < k))
			return -2;
		*a = uk - u;
		*b = k - kk;
		*path = rp;
	}
	return 0;
}

static void run_pf(const char *tag, int expect)
{
	char *region = mmap(NULL, (size_t)N * 4096, PROT_READ | PROT_WRITE,
			    MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	int n = 0, miss = 0, bad = 0;

	madvise(region, (size_t)N * 4096, MADV_NOHUGEPAGE);
	for (int i = 0; i < N; i++) {
		int r = pf_sample(region + (size_t)i * 4096, &u2k[n], &k2u[n]);
		if (!r) n++; else if (r == -1) miss++; else bad++;
	}
	munmap(region, (size_t)N * 4096);
	printf("#PF %s: delivered=%d missing=%d misordered=%d pf_async=%llu -> %s\n", tag, n, miss, bad,
	       (unsigned long long)xp->pf_async,
	       (expect ? (n > N * 9 / 10 && !bad) : (n == 0)) ? "PASS" : "FAIL");
	report("u2k (pf_u2k_k - u2k_u)", u2k, n);
	report("k2u (k2u_u - pf_k2u_k)", k2u, n);
}

static void run_sc(const char *tag, int expect)
{
	int n = 0, miss = 0, bad = 0, sysret = 0, iret = 0;
	uint32_t path;

	for (int i = 0; i < N; i++) {
		int r = sc_sample(&u2k[n], &k2u[n], &path);
		if (!r) { n++; if (path == XPERF_RET_SYSRET) sysret++; else if (path == XPERF_RET_IRET) iret++; }
		else if (r == -1) miss++; else bad++;
	}
	printf("getppid %s: delivered=%d missing=%d misordered=%d sysret=%d iret=%d -> %s\n", tag, n, miss, bad,
	       sysret, iret, (expect ? (n > N * 9 / 10 && !bad && sysret == n) : (n == 0)) ? "PASS" : "FAIL");
	report("u2k (sc_u2k_k - u2k_u)", u2k, n);
	report("k2u (k2u_u - sc_k2u_k)", k2u, n);
}

static volatile uint64_t h_seq, h_u2k, h_k2u;
static volatile uint32_t h_path;

/* Runs right after kill() returned into it: snapshot that syscall's stamps. */
static void on_usr1(int sig)
{
	(void)sig;
	h_seq = xp->sc_seq;
	h_u2k = xp->sc_u2k_k;
	h_k2u = xp->sc_k2u_k;
	h_path = xp->sc_ret_path;
}

/*
 * kill() of ourselves returns into the signal handler: the frame changed, so
 * that syscall must leave by IRET.  (rt_sigreturn then restores a frame that
 * satisfies the SYSRET conditions again.)
 */
static void run_iret(void)
{
	pid_t me = getpid();
	uint64_t seq;

	signal(SIGUSR1, on_usr1);
	seq = xp->sc_seq;
	xp->sc_u2k_k = SENT;
	xp->sc_k2u_k = SENT;
	xp->sc_ret_path = 7;
	kill(me, SIGUSR1);
	printf("kill() into a handler: sc_seq +%llu ret_path=%u (IRET=%u) ordered=%d -> %s\n",
	       (unsigned long long)(h_seq - seq), h_path, XPERF_RET_IRET,
	       h_u2k < h_k2u, h_seq - seq == 1 && h_path == XPERF_RET_IRET &&
	       h_u2k != SENT && h_k2u != SENT && h_u2k < h_k2u ? "PASS" : "FAIL");
}

static int sysctl_write(const char *v)
{
	int fd = open("/proc/sys/kernel/xperf_stamps", O_WRONLY);
	int r;

	if (fd < 0)
		return -errno;
	r = write(fd, v, strlen(v)) < 0 ? -errno : 0;
	close(fd);
	return r;
}

/* Whether /proc/cpuinfo lists @flag (e.g. smap): the hooks must not care. */
static int cpu_flag(const char *flag)
{
	static char buf[16384];
	char word[64];
	int fd = open("/proc/cpuinfo", O_RDONLY), n;

	if (fd < 0)
		return -1;
	n = read(fd, buf, sizeof(buf) - 1);
	close(fd);
	buf[n > 0 ? n : 0] = 0;
	snprintf(word, sizeof(word), " %s ", flag);
	return strstr(buf, word) != NULL;
}

static void show(const char *path)
{
	char buf[512];
	int fd = open(path, O_RDONLY), n;

	if (fd < 0) { printf("%s: %s\n", path, strerror(errno)); return; }
	n = read(fd, buf, sizeof(buf) - 1);
	close(fd);
	buf[n > 0 ? n : 0] = 0;
	printf("%s: %s", path, buf);
}

/*
 * A registered child that exits, and one that execs: the pin must be dropped
 * on both paths (the kernel would leak or crash here otherwise) and the
 * parent's own registration must keep working.
 */
static void run_child_release(void)
{
	for (int exec = 0; exec < 2; exec++) {
		pid_t pid = fork();
		int status = -1;

		if (!pid) {
			char *pg = mmap(NULL, 4096, PROT_READ | PROT_WRITE,
					MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);

			volatile struct xperf_page *cp = (void *)pg;
			uint64_t seq;

			if (prctl(PR_XPERF, PR_XPERF_REGISTER, (unsigned long)pg, 0, 0))
				_exit(2);
			seq = cp->sc_seq;
			getppid();
			if (cp->sc_seq != seq + 1)
				_exit(3);
			if (exec)
				execl("/init", "/init", "exec-child", (char *)NULL);
			_exit(0);
		}
		waitpid(pid, &status, 0);
		printf("registered child %s: status %d -> %s\n", exec ? "execs" : "exits",
		       WIFEXITED(status) ? WEXITSTATUS(status) : -1,
		       WIFEXITED(status) && !WEXITSTATUS(status) ? "PASS" : "FAIL");
	}
}

int main(int argc, char **argv)
{
	void *page;
	int reg_errno;
	long r;

	if (argc > 1 && !strcmp(argv[1], "exec-child"))
		return prctl(PR_XPERF, PR_XPERF_QUERY, 0, 0, 0) == XPERF_ABI_VERSION ? 0 : 4;

	memset(u2k, 0, sizeof(u2k));
	memset(k2u, 0, sizeof(k2u));
	mount("proc", "/proc", "proc", 0, NULL);
	printf("\n=== xperf test ===\n");
	show("/proc/cmdline");
	show("/proc/sys/kernel/xperf_stamps");
	printf("cpu flags: smap=%d smep=%d pti=%d\n", cpu_flag("smap"), cpu_flag("smep"),
	       cpu_flag("pti"));

	r = prctl(PR_XPERF, PR_XPERF_QUERY, 0, 0, 0);
	printf("QUERY -> %ld (%s)\n", r, r < 0 ? strerror(errno) : "ok");
	r = prctl(PR_XPERF, 9, 0, 0, 0);
	printf("bad op -> %ld (%s)\n", r, r < 0 ? strerror(errno) : "ok");

	page = mmap(NULL, 4096, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	r = prctl(PR_XPERF, PR_XPERF_REGISTER, (unsigned long)page + 8, 0, 0);
	printf("REGISTER unaligned -> %ld (%s)\n", r, r < 0 ? strerror(errno) : "ok");
	r = prctl(PR_XPERF, PR_XPERF_REGISTER, (unsigned long)page, 0, 0);
	reg_errno = errno;
	printf("REGISTER -> %ld (%s)\n", r, r < 0 ? strerror(errno) : "ok");
	xp = page;
	if (r) {
		/* Unregistered system: just make sure faults and syscalls work. */
		char *q = mmap(NULL, 64 << 20, PROT_READ | PROT_WRITE,
			       MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
		int w;

		for (long i = 0; i < (64 << 20); i += 4096)
			q[i] = 1;
		for (int i = 0; i < 100000; i++)
			getppid();
		printf("no registration: 16384 faults + 100000 getppid ran\n");
		w = sysctl_write("1");
		printf("REGISTER EBUSY and sysctl=1 ENODEV without xperf_stamps: %s/%s -> %s\n",
		       strerror(reg_errno), strerror(-w),
		       reg_errno == EBUSY && w == -ENODEV ? "PASS" : "FAIL");
		return 0;
	}
	printf("page: magic=%#llx abi=%u flags=%#x (kpti=%d fred=%d kvm=%d)\n",
	       (unsigned long long)xp->magic, xp->abi_version, xp->flags,
	       !!(xp->flags & XPERF_FLAG_KPTI), !!(xp->flags & XPERF_FLAG_FRED),
	       !!(xp->flags & XPERF_FLAG_KVM_GUEST));

	run_pf("registered", 1);
	run_sc("registered", 1);
	run_iret();
	run_child_release();
	run_sc("after children", 1);

	/* A forked child is not registered: its faults and syscalls leave the page alone. */
	{
		uint64_t pf = xp->pf_seq, sc = xp->sc_seq;
		pid_t pid = fork();
		if (!pid) {
			char *q = mmap(NULL, 1 << 20, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
			for (int i = 0; i < (1 << 20); i += 4096) q[i] = 1;
			for (int i = 0; i < 1000; i++) getppid();
			_exit(0);
		}
		waitpid(pid, NULL, 0);
		/* fork/wait themselves are our syscalls: allow those, but not 1000 more */
		printf("fork: child faults/syscalls not counted: pf_seq +%llu sc_seq +%llu -> %s\n",
		       (unsigned long long)(xp->pf_seq - pf), (unsigned long long)(xp->sc_seq - sc),
		       (xp->sc_seq - sc < 10 && xp->pf_seq - pf < 50) ? "PASS" : "FAIL");
	}

	printf("sysctl=0 -> %d\n", sysctl_write("0"));
	run_pf("sysctl=0", 0);
	run_sc("sysctl=0", 0);
	r = prctl(PR_XPERF, PR_XPERF_REGISTER, (unsigned long)page, 0, 0);
	printf("REGISTER with sysctl=0 -> %ld (%s)\n", r, r < 0 ? strerror(errno) : "ok");
	printf("sysctl=1 -> %d\n", sysctl_write("1"));
	run_sc("sysctl=1 again", 1);

	r = prctl(PR_XPERF, PR_XPERF_UNREGISTER, 0, 0, 0);
	printf("UNREGISTER -> %ld\n", r);
	run_pf("unregistered", 0);
	run_sc("unregistered", 0);
	r = prctl(PR_XPERF, PR_XPERF_REGISTER, (unsigned long)page, 0, 0);
	printf("REGISTER again -> %ld\n", r);
	run_pf("re-registered", 1);
	printf("=== done ===\n");
	return 0;
}
