/* Calls one function of a library in a loop and prints the time per call:
 * the workload of scripts/bench.py --prologues and scripts/gpu/probe-cost.sh,
 * which price a probe hit on each kind of first instruction.
 *   prologue_loop LIB SYMBOL CALLS [REPS] [TOUCH_KIB] [STRIDE]
 * SYMBOL is called as int f(void *out) with an 8-byte out buffer
 * (cudaGetDevice, cuDriverGetVersion, cuCtxGetCurrent, cudaGetLastError...).
 * Between calls it touches TOUCH_KIB KiB of memory, one byte every STRIDE
 * bytes (default 4096: a page each): a program's working set, whose cache
 * lines and TLB entries a trap into the kernel may cost it.
 * Prints the fastest of REPS (default 5) batches: ns_per_call=N (the
 * touching included). */
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

static double now_ns(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec * 1e9 + ts.tv_nsec;
}

int main(int argc, char **argv)
{
	if (argc < 4) {
		fprintf(stderr, "usage: prologue_loop LIB SYMBOL CALLS [REPS]\n");
		return 2;
	}
	void *lib = dlopen(argv[1], RTLD_NOW | RTLD_LOCAL);
	if (!lib) {
		fprintf(stderr, "prologue_loop: %s\n", dlerror());
		return 1;
	}
	int (*fn)(void *) = (int (*)(void *))dlsym(lib, argv[2]);
	if (!fn) {
		fprintf(stderr, "prologue_loop: %s: no %s\n", argv[1], argv[2]);
		return 1;
	}
	const long calls = atol(argv[3]);
	const int reps = argc > 4 ? atoi(argv[4]) : 5;
	const long touch = argc > 5 ? atol(argv[5]) * 1024 : 0;
	const long stride = argc > 6 ? atol(argv[6]) : 4096;
	volatile unsigned char *mem = touch > 0 ? calloc(1, touch) : NULL;
	if (touch > 0 && (!mem || stride <= 0)) {
		fprintf(stderr, "prologue_loop: bad TOUCH_KIB or STRIDE\n");
		return 2;
	}
	unsigned long long out = 0;
	int first = fn(&out); /* initialises what the library initialises once */
	double best = 0;
	for (int r = 0; r < reps; r++) {
		const double start = now_ns();
		for (long i = 0; i < calls; i++) {
			fn(&out);
			for (long b = 0; b < touch; b += stride)
				mem[b]++;
		}
		const double per = (now_ns() - start) / calls;
		if (r == 0 || per < best)
			best = per;
	}
	printf("ns_per_call=%.1f first_ret=%d\n", best, first);
	return 0;
}
