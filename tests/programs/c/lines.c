/*
 * The shapes a line probe meets, in C: a for header, a condition with &&, a branch
 * taken for some items only, and a helper inlined into its caller. Each round prints,
 * per item, one JSON line with what it computed, so a test can compare what a probe
 * read with what the program had. Lines a test names carry a marker (at: NAME).
 *
 * "lines ROUNDS [PAUSE_MS] [LIMIT]": ROUNDS 0 runs until killed.
 */
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

struct order {
	long id;
	long qty;
	long price;
};

static inline long clamp(long v, long lo, long hi)
{
	if (v < lo) /* at: clamp-low */
		return lo;
	if (v > hi)
		return hi;
	return v;
}

__attribute__((noinline)) long process(long round, struct order *orders, long n, long limit)
{
	long total = 0;
	long rejected = 0;
	for (long i = 0; i < n; i++) { /* at: for */
		struct order *o = &orders[i];
		long cost = o->qty * o->price; /* at: cost */
		long clamped = clamp(cost, 0, limit); /* at: clamp-call */
		if (o->qty > 0 && cost < limit) { /* at: and */
			total += clamped; /* at: accepted */
		} else {
			rejected++; /* at: rejected */
		}
		printf("{\"round\":%ld,\"id\":%ld,\"cost\":%ld,\"clamped\":%ld,\"accepted\":%s}\n",
		       round, o->id, cost, clamped, o->qty > 0 && cost < limit ? "true" : "false");
	}
	return total + rejected; /* at: return */
}

int main(int argc, char **argv)
{
	long rounds = argc > 1 ? atol(argv[1]) : 1;
	long pause = argc > 2 ? atol(argv[2]) : 0;
	long limit = argc > 3 ? atol(argv[3]) : 60;
	struct order orders[8];
	setvbuf(stdout, NULL, _IOLBF, 0);
	for (long r = 0; rounds == 0 || r < rounds; r++) {
		long n = 3 + r % 3;
		for (long i = 0; i < n; i++) {
			orders[i].id = r * 10 + i;
			orders[i].qty = (r + i) % 4;
			orders[i].price = 7 + i * 13;
		}
		long total = process(r, orders, n, limit); /* at: call-process */
		fprintf(stderr, "round %ld total %ld\n", r, total);
		if (pause > 0) {
			struct timespec ts = {pause / 1000, (pause % 1000) * 1000000L};
			nanosleep(&ts, NULL);
		}
	}
	return 0;
}
