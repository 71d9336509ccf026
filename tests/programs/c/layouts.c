/*
 * A test target for noop's binary inspection.
 *
 * The structs exercise holes, unions, bitfields (some crossing byte
 * boundaries), anonymous nested structs and unions, arrays, function
 * pointers, typedefs and enums. The functions take integers, pointers,
 * doubles and structs by value under the System V AMD64 calling convention:
 * small structs travel in registers, larger ones in memory on the stack.
 *
 * Without arguments it exits at once; "layouts run" calls everything.
 */
#include <stdint.h>
#include <stdio.h>
#include <string.h>

enum state { STATE_IDLE, STATE_RUNNING = 4, STATE_DONE };

typedef int (*handler_fn)(void *arg, int code);

struct job {
	char tag;
	long id;
	short prio;
	int weight;
	double cost;
	enum state state;
	handler_fn run;
	void (*done)(struct job *self);
	struct job *next;
	char name[13];
	unsigned char flags;
};

struct flags {
	unsigned int ready : 1;
	unsigned int mode : 3;
	unsigned int level : 7;
	unsigned int wide : 13;
	unsigned char tail;
	uint64_t big : 40;
	int16_t small : 5;
	signed char sign : 2;
};

union value {
	int64_t i;
	double d;
	char bytes[12];
	struct {
		uint32_t lo;
		uint32_t hi;
	} parts;
};

struct packet {
	uint16_t kind;
	union {
		uint32_t addr4;
		uint8_t addr6[16];
	};
	struct {
		uint8_t ttl;
		uint64_t seq;
	};
	union value val;
	float weights[3][2];
	struct job *jobs[4];
	const char *label;
};

typedef struct {
	int x;
	int y;
} point_t;

typedef struct rect {
	point_t min;
	point_t max;
	uint8_t color;
} rect_t;

struct pair {
	long first;
	double second;
};

__attribute__((noinline)) long add_ints(int a, long b, short c, char d, unsigned e, long f, long g)
{
	return a + b + c + d + e + f + g;
}

__attribute__((noinline)) double mix(double x, int n, float y, const char *s)
{
	return x * n + y + (double)strlen(s);
}

__attribute__((noinline)) int by_value(point_t p, struct pair q, rect_t r)
{
	return p.x + p.y + (int)q.first + (int)q.second + r.max.x + r.color;
}

__attribute__((noinline)) long with_job(struct job *j, struct flags f, union value v)
{
	return j->id + f.mode + f.wide + (long)f.big + v.parts.lo;
}

__attribute__((noinline)) int with_packet(const struct packet *p, int (*cb)(void *, int), enum state s)
{
	return p->kind + p->ttl + (int)s + (cb ? cb((void *)p, 1) : 0);
}

static int handle(void *arg, int code)
{
	return arg != NULL ? code : -code;
}

static void finish(struct job *self)
{
	self->state = STATE_DONE;
}

int main(int argc, char **argv)
{
	if (argc < 2 || strcmp(argv[1], "run") != 0)
		return 0;
	struct job j = { .tag = 'j', .id = 42, .prio = 3, .weight = 7, .cost = 1.5,
			 .state = STATE_RUNNING, .run = handle, .done = finish, .name = "job" };
	struct flags f = { .ready = 1, .mode = 5, .level = 100, .wide = 4000, .tail = 9,
			   .big = 123456789012ULL, .small = -3, .sign = 1 };
	/* Every byte set: a caller passes both eightbytes of v only when both are defined. */
	union value v = { .bytes = "lmnopqrstuv" };
	struct packet pk = { .kind = 2, .addr4 = 0x7f000001, .ttl = 64, .seq = 9,
			     .val = v, .label = "pk" };
	pk.jobs[0] = &j;
	point_t p = { 1, 2 };
	struct pair q = { 3, 4.5 };
	rect_t r = { { 0, 0 }, { 5, 6 }, 7 };
	long total = add_ints(1, 2, 3, 4, 5, 6, 7);
	total += (long)mix(1.5, 2, 0.25f, "abc");
	total += by_value(p, q, r);
	total += with_job(&j, f, v);
	total += with_packet(&pk, j.run, j.state);
	j.done(&j);
	printf("%ld %d\n", total, (int)j.state);
	return 0;
}
