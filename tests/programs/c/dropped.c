/*
 * A test target whose compiler changes how some functions are called.
 *
 * Built at -O2 by GCC and by clang: GCC turns tally and quantity into clones
 * with new signatures (tally.constprop.0.isra.0 takes o->id, not o; quantity.isra.0
 * takes o->qty); clang drops tally's unused argument, so qty moves to rsi, and
 * leaves rsi as it was when main calls kept, which never reads spare. kept and
 * kept_used keep the convention: they are visible outside this file. priced
 * returns a struct in memory (System V's MEMORY class).
 *
 * "dropped N" makes N rounds of calls and prints, for each round, one JSON line
 * with every value it passed (after settle's own line).
 */
#include <stdio.h>
#include <stdlib.h>

struct order {
	long id;
	int qty;
	double price;
	const char *sku;
};

static __attribute__((noinline)) long tally(struct order *o, long unused, int qty)
{
	return o->id * 3 + qty;
}

static __attribute__((noinline)) long quantity(const struct order *o, int scale)
{
	return (long)o->qty * scale;
}

/* Always called with seed 7: both compilers describe seed as that constant, and
 * clang's location lists for o and rounds are DWARF 5 indexed lists (loclistx). */
static __attribute__((noinline)) long settle(const struct order *o, long seed, int rounds)
{
	long acc = seed;
	for (int i = 0; i < rounds; i++)
		acc = acc * 31 + o->id + i;
	printf("{\"settled\": %ld}\n", acc);
	return acc + o->qty;
}

__attribute__((noinline)) long kept(long a, long spare, const struct order *o)
{
	return a + o->qty;
}

__attribute__((noinline)) long kept_used(long a, long spare, const struct order *o)
{
	return a + spare * o->qty;
}

/* Returns a struct too large for registers: in memory, its address in rax. */
__attribute__((noinline)) struct order priced(long id, int qty)
{
	struct order p = { id * 2, qty + 1, 1.5 * qty, "priced" };
	return p;
}

int main(int argc, char **argv)
{
	int n = argc > 1 ? atoi(argv[1]) : 3;
	long sum = 0;
	for (int i = 0; i < n; i++) {
		struct order o = { 1000 + i, 7 * i + 1, 2.5 * i, "sku" };
		long u = 40 + i;
		sum += tally(&o, u, i + 2);
		sum += quantity(&o, i + 3);
		sum += kept(i * 11, u, &o);
		sum += kept_used(i * 13, u + 5, &o);
		sum += settle(&o, 7, i % 4);
		struct order p = priced(o.id, o.qty);
		sum += p.id + p.qty;
		printf("{\"id\": %ld, \"qty\": %d, \"unused\": %ld, \"tally_qty\": %d, "
		       "\"scale\": %d, \"kept_a\": %d, \"used_a\": %d, \"spare\": %ld, "
		       "\"rounds\": %d}\n",
		       o.id, o.qty, u, i + 2, i + 3, i * 11, i * 13, u + 5, i % 4);
	}
	printf("{\"sum\": %ld}\n", sum);
	return 0;
}
