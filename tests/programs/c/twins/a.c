/* One of two files that each have a static function named twin: the linker keeps both,
 * as local symbols of one name at two addresses. */
#include <stdio.h>

static int __attribute__((noinline)) twin(int x) { return x + 1; }

int from_a(int n) {
    int total = 0;
    for (int i = 0; i < n; i++)
        total += twin(i);
    return total;
}
