/* A tiny test harness: CHECK records a failure and carries on; RUN runs a test. */
#ifndef HARNESS_H
#define HARNESS_H

#include <stdio.h>

static int h_failures;
static int h_checks;

#define CHECK(cond)                                                                     \
    do {                                                                                \
        h_checks++;                                                                     \
        if (!(cond)) {                                                                  \
            h_failures++;                                                               \
            fprintf(stderr, "%s:%d: CHECK failed: %s\n", __FILE__, __LINE__, #cond);    \
        }                                                                               \
    } while (0)

#define CHECK_EQ(a, b)                                                                  \
    do {                                                                                \
        long long h_a = (long long)(a), h_b = (long long)(b);                           \
        h_checks++;                                                                     \
        if (h_a != h_b) {                                                               \
            h_failures++;                                                               \
            fprintf(stderr, "%s:%d: %s == %s failed: %lld != %lld\n", __FILE__, __LINE__, \
                    #a, #b, h_a, h_b);                                                  \
        }                                                                               \
    } while (0)

#define RUN(fn)                                                                         \
    do {                                                                                \
        int h_before = h_failures;                                                      \
        fn();                                                                           \
        printf("%-40s %s\n", #fn, h_failures == h_before ? "ok" : "FAIL");              \
    } while (0)

#define HARNESS_EXIT()                                                                  \
    (printf("%d checks, %d failures\n", h_checks, h_failures), h_failures ? 1 : 0)

#endif
