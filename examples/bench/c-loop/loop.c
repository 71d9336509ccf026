/* loop: the C workload of `noop bench`. It calls work() in a tight loop and
 * says how long each round took, so the cost a probe adds to one call can be
 * measured. Each round prints one JSON line:
 *
 *   {"op": "func", "calls": 1000000, "ns": 2100000, "ns_per_call": 2.100}
 *
 * and the end prints {"final": N, "calls_total": N}: each call adds one to a
 * chained value, so the final value is the number of calls made.
 *
 * Build: gcc -O2 -g -o loop loop.c
 * Usage: loop [-op func] [-n CALLS_PER_ROUND] [-rounds ROUNDS]
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

/* Not inlined, not cloned (a clone would carry another symbol name), and the
 * empty volatile asm keeps the compiler from treating it as pure. */
__attribute__((noinline, noclone)) long work(long x)
{
	asm volatile("");
	return x + 1;
}

static long long now_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (long long)ts.tv_sec * 1000000000LL + ts.tv_nsec;
}

static int usage(void)
{
	fprintf(stderr, "usage: loop [-op func] [-n CALLS_PER_ROUND] [-rounds ROUNDS]\n");
	return 2;
}

int main(int argc, char **argv)
{
	long n = 1000000, rounds = 5, acc = 0;
	int i;

	for (i = 1; i < argc; i++) {
		const char *flag = argv[i];
		char *end;
		long value;

		if (flag[0] == '-' && flag[1] == '-')
			flag++;
		if (i + 1 >= argc)
			return usage();
		if (strcmp(flag, "-op") == 0) {
			if (strcmp(argv[++i], "func") != 0)
				return usage();
			continue;
		}
		value = strtol(argv[++i], &end, 10);
		if (*end != '\0' || value <= 0)
			return usage();
		if (strcmp(flag, "-n") == 0)
			n = value;
		else if (strcmp(flag, "-rounds") == 0)
			rounds = value;
		else
			return usage();
	}

	for (long r = 0; r < rounds; r++) {
		long long begin = now_ns(), ns;

		for (long k = 0; k < n; k++)
			acc = work(acc);
		ns = now_ns() - begin;
		printf("{\"op\": \"func\", \"calls\": %ld, \"ns\": %lld, \"ns_per_call\": %.3f}\n",
		       n, ns, (double)ns / (double)n);
		fflush(stdout);
	}
	printf("{\"final\": %ld, \"calls_total\": %ld}\n", acc, n * rounds);
	return 0;
}
