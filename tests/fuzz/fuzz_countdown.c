/* Fuzzes the countdown parser and completion extraction. Input: the first byte picks how many of the fixed numbers
 * are given (and use_all), the rest is the completion. Checks: no crash, no overread, and that a reported value has a
 * positive denominator in lowest terms; evaluating the same expression twice gives the same answer. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "reward/countdown.h"

static int64_t gcd(int64_t a, int64_t b) {
    if (a < 0) a = -a;
    while (b) {
        int64_t t = a % b;
        a = b;
        b = t;
    }
    return a;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (size < 1) return 0;
    static const int64_t pool[CPT_COUNTDOWN_MAX_NUMBERS] = {1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 25, 50, 75, 100, 3, 7};
    int n = data[0] % (CPT_COUNTDOWN_MAX_NUMBERS + 1);
    int use_all = (data[0] >> 7) & 1;
    const char *text = (const char *)data + 1;
    size_t len = size - 1;
    int64_t num, den, num2, den2;
    char why[128];
    int rc = cpt_countdown_eval(text, len, pool, n, use_all, &num, &den, why, sizeof why);
    if (rc == 0) {
        if (den <= 0 || gcd(num, den) != 1) abort();
        if (cpt_countdown_eval(text, len, pool, n, use_all, &num2, &den2, why, sizeof why) != 0) abort();
        if (num2 != num || den2 != den) abort();
    } else if (why[0] == 0) {
        abort(); /* a failure always says why */
    }
    char *e = cpt_countdown_extract(text, len);
    if (e && strlen(e) > len) abort();
    free(e);
    int valid;
    (void)cpt_countdown_grade(text, len, pool, n, 24, use_all, &valid, why, sizeof why);
    return 0;
}
