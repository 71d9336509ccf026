/*
 * locals keeps values of each kind a line probe reads — a struct, pointers into the
 * stack and the heap, integers of several sizes — live across calls, so that the
 * compiler keeps them in frame slots (-O0) and in registers and pieces (-O2). Lines
 * print what they computed, so the optimizer keeps every value.
 *
 * "locals CALLS": handle is called CALLS times.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct point {
	long x;
	int y;
	short tag;
	unsigned char flags;
};

__attribute__((noinline)) long handle(const char *name, long n, const long *weights, int count)
{
	struct point p = {n * 3, count, (short)(n % 5), (unsigned char)(n & 3)};
	long total = 0;
	char *copy = malloc(strlen(name) + 8);
	sprintf(copy, "%s-%ld", name, n);
	for (int i = 0; i < count; i++) {
		long w = weights[i] * p.x;
		total += w + p.tag;
	}
	size_t len = strlen(copy);
	printf("{\"name\":\"%s\",\"n\":%ld,\"x\":%ld,\"y\":%d,\"total\":%ld,\"len\":%zu}\n",
	       copy, n, p.x, p.y, total, len);
	free(copy);
	return total + (long)len + p.flags;
}

int main(int argc, char **argv)
{
	int calls = argc > 1 ? atoi(argv[1]) : 6;
	long weights[4] = {2, 3, 5, 7};
	long sum = 0;
	setvbuf(stdout, NULL, _IOLBF, 0);
	for (int c = 0; c < calls; c++)
		sum += handle("svc", c, weights, 1 + c % 4);
	return sum == 0;
}
