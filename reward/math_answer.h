/* Math answers: extracting the final answer of a solution and deciding whether two answers are the same.
 *
 * Extraction: the contents of the last \boxed{...} (or \fbox{...}, nested braces honoured, also "\boxed 5"), else
 * the rest of the line after the last "####" (GSM8K style). Equivalence: both sides are normalised (surrounding $,
 * \( \), \text{...} wrappers, \left/\right, LaTeX spacing, \dfrac -> \frac, a leading "x =", units after a number,
 * % and degree signs) and compared as exact rationals when both are numbers (integers, decimals, signs, thousands
 * separators, trailing zeros, a/b, \frac{a}{b}, \frac12, mixed numbers 2\frac{1}{2}, exponents 1e3); numbers too
 * large for 64-bit rationals compare as long double with relative tolerance 1e-12. Otherwise the normalised
 * strings must match exactly. All functions take length-bounded input and never read past it. */
#ifndef CPT_REWARD_MATH_ANSWER_H
#define CPT_REWARD_MATH_ANSWER_H

#include <stddef.h>

/* The final answer of text[0..len), malloc'd and NUL-terminated, or NULL when the text has none. */
char *cpt_math_extract_answer(const char *text, size_t len);

/* 1 if the two answers (already extracted) are equivalent, 0 if not. */
int cpt_math_answers_equal(const char *a, const char *b);

/* The normalised form used for the string comparison, malloc'd (for tests and logs). */
char *cpt_math_normalize(const char *answer);

/* A gold answer may be bare ("72") or carry its own marker ("... #### 72", "\boxed{72}"): the answer to compare
 * with, malloc'd. */
char *cpt_math_gold_answer(const char *gold);

/* Grades a completion against a gold answer: 1 correct, 0 wrong or no answer found. *found (may be NULL) tells
 * whether the completion had an extractable answer. */
int cpt_math_grade(const char *completion, size_t len, const char *gold, int *found);

#endif
