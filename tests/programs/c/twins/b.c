/* The other file with a static twin, and main: calls a's twin -a times and b's -b
 * times (defaults 3 and 5), then prints both counts as JSON. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int from_a(int n);

static int __attribute__((noinline)) twin(int x) { return x * 2; }

int main(int argc, char **argv) {
    int a = 3, b = 5, total = 0;
    for (int i = 1; i + 1 < argc; i += 2) {
        if (strcmp(argv[i], "-a") == 0) a = atoi(argv[i + 1]);
        if (strcmp(argv[i], "-b") == 0) b = atoi(argv[i + 1]);
    }
    total += from_a(a);
    for (int i = 0; i < b; i++)
        total += twin(i);
    printf("{\"a\": %d, \"b\": %d, \"total\": %d}\n", a, b, total);
    return 0;
}
