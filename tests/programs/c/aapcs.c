/* Functions whose parameters cover AAPCS64's rules (tests/test_arm64.py): general and
 * SIMD registers counted apart, the stack past eight of each, homogeneous
 * floating-point aggregates, small aggregates in general registers (a 16-aligned one
 * from an even register), large ones by reference, a long double. Built -O2 with DWARF
 * by gcc-aarch64-linux-gnu; each function uses every parameter, and noipa keeps the
 * compiler from changing how any is called, so DWARF's location of each at the entry
 * is where the caller put it. */
#include <complex.h>
#include <stdio.h>

struct pair { int a; long b; };                 /* 16 bytes: x registers */
struct three { float x, y, z; };                /* an HFA of three floats */
struct twod { double d[2]; };                   /* an HFA of two doubles */
struct big { long a, b, c; };                   /* 24 bytes: by reference */
struct wide { __int128 v; };                    /* 16-aligned: from an even register */
struct mixed { float f; int i; };               /* not an HFA: one x register */

volatile double sink_d;
volatile long sink_l;

__attribute__((noipa)) long ints(int a, long b, char c, unsigned short d) {
	return a + b + c + d;
}

__attribute__((noipa)) double floats(double a, int b, float c, long d, double e) {
	sink_l = b + d;
	return a + c + e;
}

__attribute__((noipa)) long nine(long a, long b, long c, long d, long e, long f, long g,
				  long h, long i, int j) {
	return a + b + c + d + e + f + g + h + i + j;
}

__attribute__((noipa)) double nine_doubles(double a, double b, double c, double d,
					    double e, double f, double g, double h,
					    double i, float j) {
	return a + b + c + d + e + f + g + h + i + j;
}

__attribute__((noipa)) double hfa(struct three t, struct twod u, int n) {
	return t.x + t.y + t.z + u.d[0] + u.d[1] + n;
}

__attribute__((noipa)) double cplx(double complex z, float w) {
	return creal(z) + cimag(z) + w;
}

__attribute__((noipa)) long small(int n, struct pair p, struct mixed m) {
	return n + p.a + p.b + m.i + (long)m.f;
}

__attribute__((noipa)) long aligned(int n, struct wide w, long after) {
	return n + (long)w.v + after;
}

__attribute__((noipa)) long byref(struct big b, int n) {
	return b.a + b.b + b.c + n;
}

__attribute__((noipa)) long double quad(long double q, double d) {
	return q + d;
}

__attribute__((noipa)) long spill(long a, long b, long c, long d, long e, long f,
				   long g, struct pair p) {
	return a + b + c + d + e + f + g + p.a + p.b;
}

int main(void) {
	struct pair p = {1, 2};
	struct three t = {1.5f, 2.5f, 3.5f};
	struct twod u = {{4.5, 5.5}};
	struct big b = {7, 8, 9};
	struct wide w = {10};
	struct mixed m = {1.0f, 3};
	sink_l = ints(1, 2, 3, 4) + nine(1, 2, 3, 4, 5, 6, 7, 8, 9, 10) + small(1, p, m) +
		 aligned(1, w, 2) + byref(b, 3) + spill(1, 2, 3, 4, 5, 6, 7, p);
	sink_d = floats(1, 2, 3, 4, 5) + nine_doubles(1, 2, 3, 4, 5, 6, 7, 8, 9, 10) +
		 hfa(t, u, 6) + cplx(1 + 2 * I, 3) + (double)quad(1, 2);
	printf("%ld %f\n", sink_l, sink_d);
	return 0;
}
