/* metrics.jsonl: lines written are valid JSON with step/time and exact values, NaN/inf as null, misuse
 * reported, torn lines healed on open and skipped on read, resumed runs re-logging steps, key listing. */
#include <jansson.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <sys/wait.h>
#include <unistd.h>

#include "core/fs.h"
#include "core/json_util.h"
#include "core/metrics.h"
#include "tests/check.h"

static char dir[] = "/tmp/cpt-test-metrics-XXXXXX";

/* Non-empty lines: a writer that opens the file while another is appending may see a line in progress, take it for
 * a torn one and start its first record on a new line; the empty line that leaves is skipped by every reader. */
static int count_lines(const char *path) {
    size_t len;
    char *s = cpt_read_file(path, &len, NULL);
    int n = 0;
    for (size_t i = 0; s && i < len; i++) n += s[i] == '\n' && i > 0 && s[i - 1] != '\n';
    free(s);
    return n;
}

/* A resume from step 3 after a lost attempt that reached step 5: steps 4 and 5 are written again, once. */
static void truncate_on_resume(void) {
    char path[256];
    snprintf(path, sizeof path, "%s/resumed.jsonl", dir);
    cpt_err err = {{0}};
    CHECK_EQ_INT(cpt_metrics_truncate_after(path, 3, &err), 0); /* no file yet: nothing to do */
    CHECK(!cpt_path_exists(path));
    const char *lost = "{\"step\":1,\"a\":1}\n{\"step\":2,\"a\":2}\n{\"step\":3,\"a\":3}\n"
                       "{\"step\":3,\"val\":0.5}\n{\"step\":4,\"a\":4}\n{\"step\":5,\"a\":5}\n{\"step\":6,\"a";
    CHECK(cpt_write_file_atomic(path, lost, strlen(lost), &err) == 0);
    CHECK_EQ_INT(cpt_metrics_truncate_after(path, 3, &err), 3); /* steps 4, 5 and the torn line */
    cpt_metrics *m = cpt_metrics_open(path, &err);
    for (int step = 4; step <= 6; step++) {
        cpt_metrics_begin(m, step);
        cpt_metrics_add(m, "a", 10 * step);
        CHECK_MSG(cpt_metrics_end(m, &err) == 0, "%s", err.msg);
    }
    cpt_metrics_close(m);
    char *text = cpt_read_file(path, NULL, &err);
    int counts[8] = {0};
    for (const char *p = text; p && (p = strstr(p, "\"step\":")); p += 7) {
        int st = atoi(p + 7);
        if (st >= 0 && st < 8) counts[st]++;
    }
    free(text);
    CHECK_EQ_INT(counts[1], 1);
    CHECK_EQ_INT(counts[3], 2); /* two records of step 3 (train and validation) both belong to the checkpoint */
    CHECK_EQ_INT(counts[4], 1);
    CHECK_EQ_INT(counts[5], 1);
    CHECK_EQ_INT(counts[6], 1);
    CHECK_EQ_INT(count_lines(path), 7);
    cpt_metrics_series s;
    CHECK_EQ_INT(cpt_metrics_read_series(path, "a", &s, &err), 0);
    CHECK_EQ_INT(s.n, 6);
    CHECK_EQ_INT(s.bad_lines, 0);
    CHECK_NEAR(s.values[4], 50, 0);
    cpt_metrics_series_free(&s);
    /* a start from scratch keeps nothing */
    CHECK_EQ_INT(cpt_metrics_truncate_after(path, -1, &err), 7);
    CHECK_EQ_INT(count_lines(path), 0);
}

int main(void) {
    if (!mkdtemp(dir)) { perror("mkdtemp"); return 1; }
    char path[256];
    snprintf(path, sizeof path, "%s/metrics.jsonl", dir);
    cpt_err err = {{0}};

    cpt_metrics *m = cpt_metrics_open(path, &err);
    CHECK_MSG(m != NULL, "%s", err.msg);
    cpt_metrics_set_fsync_every(m, 2);
    double now = (double)time(NULL);
    for (int step = 1; step <= 5; step++) {
        cpt_metrics_begin(m, step);
        cpt_metrics_add(m, "reward/mean", 0.1 * step);
        cpt_metrics_add(m, "loss/policy", step == 3 ? NAN : 1.0 / step);
        cpt_metrics_add_int(m, "tokens", 1000000000000LL + step);
        if (step % 2) cpt_metrics_add(m, "perf/mfu", step == 5 ? INFINITY : 0.5);
        cpt_metrics_add_str(m, "phase", "train \"q\"\n");
        CHECK_MSG(cpt_metrics_end(m, &err) == 0, "%s", err.msg);
    }
    CHECK_EQ_INT(count_lines(path), 5);

    /* each line is one JSON object with the exact values */
    FILE *f = fopen(path, "r");
    char line[4096];
    int lineno = 0;
    while (f && fgets(line, sizeof line, f)) {
        lineno++;
        json_error_t je;
        json_t *j = json_loads(line, JSON_REJECT_DUPLICATES, &je);
        CHECK_MSG(json_is_object(j), "line %d: %s", lineno, je.text);
        if (!j) continue;
        CHECK_EQ_INT(json_integer_value(json_object_get(j, "step")), lineno);
        double t = json_number_value(json_object_get(j, "time"));
        CHECK(t >= now - 5 && t <= now + 60);
        CHECK(json_real_value(json_object_get(j, "reward/mean")) == 0.1 * lineno); /* shortest form reads back exact */
        if (lineno == 3) CHECK(json_is_null(json_object_get(j, "loss/policy")));
        if (lineno == 5) CHECK(json_is_null(json_object_get(j, "perf/mfu")));
        CHECK_EQ_INT(json_integer_value(json_object_get(j, "tokens")), 1000000000000LL + lineno);
        CHECK_EQ_STR(json_string_value(json_object_get(j, "phase")), "train \"q\"\n");
        json_decref(j);
    }
    if (f) fclose(f);
    CHECK_EQ_INT(lineno, 5);

    /* misuse: reported by end with the key, nothing written */
    cpt_metrics_begin(m, 6);
    cpt_metrics_add(m, "a", 1);
    cpt_metrics_add(m, "a", 2);
    CHECK(cpt_metrics_end(m, &err) == -1 && strstr(err.msg, "\"a\"") && strstr(err.msg, "twice"));
    cpt_metrics_begin(m, 6);
    cpt_metrics_add(m, "step", 1);
    CHECK(cpt_metrics_end(m, &err) == -1 && strstr(err.msg, "reserved"));
    cpt_metrics_begin(m, 6);
    cpt_metrics_add(m, "", 1);
    CHECK(cpt_metrics_end(m, &err) == -1 && strstr(err.msg, "empty"));
    CHECK(cpt_metrics_end(m, &err) == -1 && strstr(err.msg, "without begin"));
    cpt_metrics_add(m, "late", 1);
    cpt_metrics_begin(m, 6); /* a new begin clears the misuse of an unopened record */
    CHECK(cpt_metrics_end(m, &err) == 0);
    CHECK_EQ_INT(count_lines(path), 6);
    cpt_metrics_close(m);

    /* series: null reads as NaN, absent lines skipped */
    cpt_metrics_series s;
    CHECK(cpt_metrics_read_series(path, "perf/mfu", &s, &err) == 0);
    CHECK_EQ_INT(s.n, 3);
    CHECK(s.n == 3 && s.steps[0] == 1 && s.steps[1] == 3 && s.steps[2] == 5);
    CHECK(s.n == 3 && s.values[0] == 0.5 && isnan(s.values[2]));
    CHECK(s.n == 3 && s.times[0] >= now - 5);
    CHECK_EQ_INT(s.bad_lines, 0);
    cpt_metrics_series_free(&s);
    CHECK(cpt_metrics_read_series(path, "phase", &s, &err) == -1 && strstr(err.msg, "metrics.jsonl:1") &&
          strstr(err.msg, "phase"));
    CHECK(cpt_metrics_read_series(path, "nothing", &s, &err) == 0 && s.n == 0);
    cpt_metrics_series_free(&s);

    /* a crash mid-line: the torn line is healed by the next open and skipped by readers */
    FILE *a = fopen(path, "a");
    fputs("{\"step\":7,\"reward/me", a);
    fclose(a);
    m = cpt_metrics_open(path, &err);
    cpt_metrics_begin(m, 7);
    cpt_metrics_add(m, "reward/mean", 0.7);
    CHECK(cpt_metrics_end(m, &err) == 0);
    /* a resumed run: back to step 4, then on */
    for (int step = 4; step <= 8; step++) {
        cpt_metrics_begin(m, step);
        cpt_metrics_add(m, "reward/mean", 10.0 + step);
        CHECK(cpt_metrics_end(m, &err) == 0);
    }
    cpt_metrics_close(m);
    a = fopen(path, "a");
    fputs("not json\n\n[1]\n{\"step\":\"x\"}\n", a);
    fclose(a);
    CHECK(cpt_metrics_read_series(path, "reward/mean", &s, &err) == 0);
    /* steps 1..3 from the first run, then 4..8 of the resumed one; the torn line and garbage counted */
    CHECK_EQ_INT(s.n, 8);
    int ok = s.n == 8;
    for (size_t i = 0; ok && i < 8; i++) {
        ok &= s.steps[i] == (int64_t)i + 1;
        ok &= s.values[i] == (i < 3 ? 0.1 * (double)(i + 1) : 10.0 + (double)(i + 1));
    }
    CHECK(ok);
    CHECK_EQ_INT(s.bad_lines, 4);
    CHECK_EQ_INT(s.first_bad_line, 7);
    cpt_metrics_series_free(&s);

    char **keys;
    size_t nk;
    CHECK(cpt_metrics_read_keys(path, &keys, &nk, &err) == 0);
    CHECK_EQ_INT(nk, 4);
    if (nk == 4) {
        CHECK_EQ_STR(keys[0], "loss/policy");
        CHECK_EQ_STR(keys[1], "perf/mfu");
        CHECK_EQ_STR(keys[2], "reward/mean");
        CHECK_EQ_STR(keys[3], "tokens");
    }
    cpt_metrics_keys_free(keys, nk);

    CHECK(cpt_metrics_open("/nonexistent-cpt/metrics.jsonl", &err) == NULL && strstr(err.msg, "/nonexistent-cpt"));
    CHECK(cpt_metrics_read_series("/nonexistent-cpt/m.jsonl", "k", &s, &err) == -1);
    cpt_metrics_close(NULL);
    cpt_metrics_begin(NULL, 1); /* metrics off */
    cpt_metrics_add(NULL, "x", 1);
    CHECK(cpt_metrics_end(NULL, &err) == 0);

    /* several writers appending to one file never interleave inside a line */
    snprintf(path, sizeof path, "%s/shared.jsonl", dir);
    for (int w = 0; w < 4; w++) {
        if (fork() == 0) {
            cpt_metrics *mm = cpt_metrics_open(path, NULL);
            char key[64];
            snprintf(key, sizeof key, "worker/%d/long_name_to_make_lines_longer_than_a_few_bytes", w);
            for (int i = 0; i < 200; i++) {
                cpt_metrics_begin(mm, i);
                for (int k = 0; k < 20; k++) {
                    char kk[80];
                    snprintf(kk, sizeof kk, "%s/%d", key, k);
                    cpt_metrics_add(mm, kk, i * 0.001 + k);
                }
                if (cpt_metrics_end(mm, NULL) != 0) _exit(1);
            }
            cpt_metrics_close(mm);
            _exit(0);
        }
    }
    int st, children_ok = 0;
    for (int w = 0; w < 4; w++) if (wait(&st) > 0 && WIFEXITED(st) && WEXITSTATUS(st) == 0) children_ok++;
    CHECK_EQ_INT(children_ok, 4);
    CHECK_EQ_INT(count_lines(path), 800);
    CHECK(cpt_metrics_read_series(path, "worker/2/long_name_to_make_lines_longer_than_a_few_bytes/19", &s, &err) == 0);
    CHECK_EQ_INT(s.n, 200);
    CHECK_EQ_INT(s.bad_lines, 0);
    cpt_metrics_series_free(&s);

    /* the JSON helpers under the writer */
    cpt_json_buf b;
    cpt_json_buf_init(&b);
    cpt_json_buf_string(&b, "a\"b\\c\x01\x1f\t\xc3\xa9");
    CHECK_EQ_STR(b.s, "\"a\\\"b\\\\c\\u0001\\u001f\\t\xc3\xa9\"");
    static const double nums[] = {0.1, 1.0 / 3, -0.0, 1e300, 5e-324, 123456789012345678.0, 2.5, -7};
    static const char *texts[] = {"0.1", NULL, "-0", "1e+300", "4.94065645841247e-324", NULL, "2.5", "-7"};
    for (int i = 0; i < 8; i++) {
        cpt_json_buf_reset(&b);
        cpt_json_buf_number(&b, nums[i]);
        CHECK(strtod(b.s, NULL) == nums[i]); /* reads back exactly */
        if (texts[i]) CHECK_EQ_STR(b.s, texts[i]);
        json_t *j = json_loads(b.s, JSON_DECODE_ANY, NULL); /* and is JSON */
        CHECK(json_is_number(j));
        json_decref(j);
    }
    cpt_json_buf_reset(&b);
    cpt_json_buf_number(&b, -INFINITY);
    CHECK_EQ_STR(b.s, "null");
    cpt_json_buf_free(&b);
    snprintf(path, sizeof path, "%s/bad.json", dir);
    CHECK(cpt_write_file_atomic(path, "{\"a\": 1,\n \"a\": 2}", 18, &err) == 0);
    CHECK(cpt_json_load_file(path, 0, &err) == NULL);
    char want[300];
    snprintf(want, sizeof want, "%s:2:", path);
    CHECK_MSG(strstr(err.msg, want) && strstr(err.msg, "duplicate"), "%s", err.msg);

    truncate_on_resume();
    cpt_remove_tree(dir, NULL);
    return check_summary("test_metrics");
}
