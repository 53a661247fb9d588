/* cpt plot RUN_DIR [--out FILE.png] [--keys k1,k2,...] [--smooth W]: renders series of RUN_DIR/metrics.jsonl with
 * gnuplot.
 *
 * Without --out: RUN_DIR/plots/overview.png (every chosen key, one panel each), RUN_DIR/plots/<key>.png per key
 * (a '/' in a key becomes '_') and RUN_DIR/plots/<key>.tsv, the numbers drawn (step, value, smoothed). With --out:
 * only the overview, to FILE.png. Default keys: reward/mean, train/loss, loss/policy, kl, entropy,
 * response_len/mean and the held-out evaluations val/accuracy (online runs), eval/loss, eval/exact_match (SFT),
 * eval/dpo_accuracy (DPO), those present; a key starting with val/ or eval/ is a held-out evaluation. A training series is drawn as its raw points with a smoothed line over them: the exponential
 * moving average s = W s + (1 - W) x, debiased by dividing by 1 - W^n after n points (TensorBoard's smoothing),
 * W = --smooth (default 0.9; 0 draws the raw line only). A held-out series is logged every few steps only: it is
 * drawn as its own panel, points joined by lines, never smoothed. The series are read with
 * cpt_metrics_read_series, so a resumed run's re-logged steps show once. Files are written to a temporary name and
 * renamed: a reader never sees half an image. */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "cli/commands.h"
#include "core/error.h"
#include "core/fs.h"
#include "core/metrics.h"

#define MAX_KEYS 32

static const char *default_keys[] = {"reward/mean",  "train/loss",   "loss/policy",      "kl",
                                     "entropy",      "response_len/mean", "val/accuracy", "eval/loss",
                                     "eval/exact_match", "eval/dpo_accuracy"};

typedef struct plot_series {
    char key[128];
    char data_path[4200];
    size_t n;
    int held_out; /* an evaluation on held-out data: own panel, not smoothed */
    double smooth; /* EMA weight, 0 = none */
} plot_series;

static int is_held_out_key(const char *key) { return !strncmp(key, "val/", 4) || !strncmp(key, "eval/", 5); }

/* A key as a file name: anything but [A-Za-z0-9._-] becomes '_'. */
static void key_file_name(const char *key, char *out, size_t cap) {
    size_t j = 0;
    for (size_t i = 0; key[i] && j + 1 < cap; i++) {
        char c = key[i];
        int ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '.' || c == '-' ||
                 c == '_';
        if (j == 0 && c == '.') ok = 0; /* no hidden files */
        out[j++] = ok ? c : '_';
    }
    out[j] = '\0';
}

/* Series i's file name: its key's, with "-2", "-3", ... when an earlier series' key maps to the same name ("a/b" and
 * "a_b"), so no series' data or picture replaces another's. */
static void series_file_name(const plot_series *series, int i, char *out, size_t cap) {
    key_file_name(series[i].key, out, cap);
    int same = 0;
    char other[256];
    for (int j = 0; j < i; j++) {
        key_file_name(series[j].key, other, sizeof other);
        same += !strcmp(other, out);
    }
    if (same) {
        size_t len = strlen(out);
        snprintf(out + len, cap > len ? cap - len : 0, "-%d", same + 1);
    }
}

/* A gnuplot single-quoted string: a quote is doubled, and control characters are dropped. */
static void put_quoted(FILE *f, const char *s) {
    fputc('\'', f);
    for (; *s; s++) {
        if (*s == '\'') fputs("''", f);
        else if ((unsigned char)*s >= 0x20) fputc(*s, f);
    }
    fputc('\'', f);
}

/* Writes "step value smoothed" lines (NaN for a missing value; the smoothed line carries over a gap). */
static int write_series(const char *metrics, const char *key, double smooth, const char *path, size_t *n,
                        cpt_err *err) {
    cpt_metrics_series s;
    if (cpt_metrics_read_series(metrics, key, &s, err) != 0) return -1;
    *n = s.n;
    size_t finite = 0;
    for (size_t i = 0; i < s.n; i++) finite += isfinite(s.values[i]) != 0;
    if (finite == 0) {
        cpt_metrics_series_free(&s);
        return cpt_errf(err, "%s: %s: no numeric values to plot (all null)", metrics, key);
    }
    FILE *f = fopen(path, "w");
    if (!f) {
        cpt_metrics_series_free(&s);
        return cpt_errno(err, "%s", path);
    }
    fprintf(f, "# step\t%s\tsmoothed (EMA %g, debiased)\n", key, smooth);
    double ema = 0, weight = 1; /* weight = W^n */
    for (size_t i = 0; i < s.n; i++) {
        double v = s.values[i];
        if (isfinite(v)) {
            ema = smooth * ema + (1 - smooth) * v;
            weight *= smooth;
        }
        double sm = weight < 1 ? ema / (1 - weight) : NAN;
        if (isfinite(v)) fprintf(f, "%lld\t%.17g\t%.17g\n", (long long)s.steps[i], v, sm);
        else if (isfinite(sm)) fprintf(f, "%lld\tNaN\t%.17g\n", (long long)s.steps[i], sm);
        else fprintf(f, "%lld\tNaN\tNaN\n", (long long)s.steps[i]);
    }
    int bad = ferror(f);
    if (fclose(f) != 0 || bad) {
        cpt_metrics_series_free(&s);
        return cpt_errno(err, "%s", path);
    }
    cpt_metrics_series_free(&s);
    return 0;
}

static void panel(FILE *f, const plot_series *s) {
    char title[200];
    if (s->held_out) snprintf(title, sizeof title, "%s (held-out)", s->key);
    else if (s->smooth > 0) snprintf(title, sizeof title, "%s (line: EMA %g)", s->key, s->smooth);
    else snprintf(title, sizeof title, "%s", s->key);
    fputs("set title ", f);
    put_quoted(f, title);
    fputs(" noenhanced\nplot ", f);
    put_quoted(f, s->data_path);
    if (s->held_out) fputs(" using 1:2 with linespoints lc rgb '#1a9850' pt 7 ps 1.0 lw 2 notitle\n", f);
    else if (s->smooth > 0) {
        fputs(" using 1:2 with points lc rgb '#9ecae1' pt 7 ps 0.4 notitle, ", f);
        put_quoted(f, s->data_path);
        fputs(" using 1:3 with lines lc rgb '#08519c' lw 3 notitle\n", f);
    } else fputs(" using 1:2 with linespoints pt 7 ps 0.4 lw 2 notitle\n", f);
}

/* One PNG: a single panel, or a grid of them. */
static void script_png(FILE *f, const char *png, const plot_series *s, int n, const char *run_dir) {
    int cols = n == 1 ? 1 : 2, rows = (n + cols - 1) / cols;
    fprintf(f, "set terminal png size %d,%d\nset output ", 640 * cols, 400 * rows);
    put_quoted(f, png);
    fputs("\nset grid\nset xlabel 'step'\nset key off\n", f);
    if (n > 1) {
        fprintf(f, "set multiplot layout %d,%d title ", rows, cols);
        put_quoted(f, run_dir);
        fputs(" noenhanced\n", f);
    }
    for (int i = 0; i < n; i++) panel(f, &s[i]);
    if (n > 1) fputs("unset multiplot\n", f);
    fputs("set output\n", f);
}

static int run_gnuplot(const char *script, const char *log, cpt_err *err) {
    pid_t pid = fork();
    if (pid < 0) return cpt_errno(err, "fork for gnuplot");
    if (pid == 0) {
        FILE *lf = freopen(log, "w", stderr);
        (void)lf;
        execlp("gnuplot", "gnuplot", script, (char *)NULL);
        fprintf(stderr, "cannot run gnuplot: %s\n", strerror(errno));
        _exit(127);
    }
    int status;
    while (waitpid(pid, &status, 0) < 0)
        if (errno != EINTR) return cpt_errno(err, "waiting for gnuplot");
    if (WIFEXITED(status) && WEXITSTATUS(status) == 127)
        return cpt_errf(err, "gnuplot is not installed (apt-get install gnuplot-nox)");
    if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
        char *text = cpt_read_file(log, NULL, NULL);
        cpt_errf(err, "gnuplot failed: %s", text ? text : "(no message)");
        free(text);
        return -1;
    }
    return 0;
}

/* Renders one PNG through a temporary name. */
static int render(const char *tmp_dir, const char *png, const plot_series *s, int n, const char *run_dir, cpt_err *err) {
    char script[4300], log[4300], tmp_png[4300];
    snprintf(script, sizeof script, "%s/plot.gp", tmp_dir);
    snprintf(log, sizeof log, "%s/gnuplot.log", tmp_dir);
    snprintf(tmp_png, sizeof tmp_png, "%s.tmp%ld", png, (long)getpid());
    FILE *f = fopen(script, "w");
    if (!f) return cpt_errno(err, "%s", script);
    script_png(f, tmp_png, s, n, run_dir);
    if (fclose(f) != 0) return cpt_errno(err, "%s", script);
    if (run_gnuplot(script, log, err) != 0) {
        unlink(tmp_png);
        return -1;
    }
    if (rename(tmp_png, png) != 0) {
        int e = errno;
        unlink(tmp_png);
        errno = e;
        return cpt_errno(err, "%s", png);
    }
    return 0;
}

static int usage(void) {
    fprintf(stderr, "usage: cpt plot RUN_DIR [--out FILE.png] [--keys k1,k2,...] [--smooth W]\n");
    return 2;
}

int cmd_plot(int argc, char **argv) {
    const char *run_dir = NULL, *out = NULL, *keys_arg = NULL;
    double smooth = 0.9;
    umask(077); /* plots go into the run directory, which is its owner's only */
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--out") && i + 1 < argc) out = argv[++i];
        else if (!strcmp(argv[i], "--keys") && i + 1 < argc) keys_arg = argv[++i];
        else if (!strcmp(argv[i], "--smooth") && i + 1 < argc) {
            char *end;
            const char *v = argv[++i];
            smooth = strtod(v, &end);
            if (!*v || *end || !(smooth >= 0 && smooth < 1)) {
                fprintf(stderr, "cpt plot: --smooth is a weight in [0, 1), got '%s'\n", v);
                return 2;
            }
        } else if (!strcmp(argv[i], "-h") || !strcmp(argv[i], "--help")) {
            printf("usage: cpt plot RUN_DIR [--out FILE.png] [--keys k1,k2,...] [--smooth W]\n");
            return 0;
        } else if (argv[i][0] == '-' || run_dir) return usage();
        else run_dir = argv[i];
    }
    if (!run_dir) return usage();
    cpt_err err;
    cpt_err_clear(&err);
    char metrics[4200];
    snprintf(metrics, sizeof metrics, "%s/metrics.jsonl", run_dir);
    if (!cpt_path_exists(metrics)) {
        fprintf(stderr, "cpt plot: %s: no metrics yet (is this a run directory?)\n", metrics);
        return 1;
    }
    /* Which keys: the ones asked for (each must be present), or the defaults that are present. */
    char **present = NULL;
    size_t n_present = 0;
    if (cpt_metrics_read_keys(metrics, &present, &n_present, &err) != 0) {
        fprintf(stderr, "cpt plot: %s\n", err.msg);
        return 1;
    }
    const char *wanted[MAX_KEYS];
    int n_wanted = 0, explicit_keys = keys_arg != NULL;
    char *keys_copy = keys_arg ? strdup(keys_arg) : NULL;
    if (keys_arg) {
        char *save = NULL;
        for (char *k = strtok_r(keys_copy, ",", &save); k && n_wanted < MAX_KEYS; k = strtok_r(NULL, ",", &save))
            wanted[n_wanted++] = k;
    } else {
        for (size_t i = 0; i < sizeof default_keys / sizeof default_keys[0]; i++) wanted[n_wanted++] = default_keys[i];
    }
    plot_series series[MAX_KEYS];
    int n = 0, status = 0;
    for (int i = 0; i < n_wanted; i++) {
        int found = 0;
        for (size_t j = 0; j < n_present; j++) found |= !strcmp(present[j], wanted[i]);
        if (!found) {
            if (explicit_keys) {
                fprintf(stderr, "cpt plot: %s: no numeric key '%s' (keys:", metrics, wanted[i]);
                for (size_t j = 0; j < n_present; j++) fprintf(stderr, " %s", present[j]);
                fprintf(stderr, ")\n");
                status = 1;
            }
            continue;
        }
        snprintf(series[n].key, sizeof series[n].key, "%s", wanted[i]);
        series[n].held_out = is_held_out_key(wanted[i]);
        series[n].smooth = series[n].held_out ? 0 : smooth;
        n++;
    }
    cpt_metrics_keys_free(present, n_present);
    free(keys_copy);
    if (status) return status;
    if (n == 0) {
        fprintf(stderr, "cpt plot: %s: none of the default keys is present; name some with --keys\n", metrics);
        return 1;
    }
    char tmpl[] = "/tmp/cpt-plot-XXXXXX";
    char *tmp_dir = mkdtemp(tmpl);
    if (!tmp_dir) {
        perror("cpt plot: mkdtemp");
        return 1;
    }
    for (int i = 0; i < n && !status; i++) {
        char fname[256];
        series_file_name(series, i, fname, sizeof fname);
        snprintf(series[i].data_path, sizeof series[i].data_path, "%s/%s.dat", tmp_dir, fname);
        if (write_series(metrics, series[i].key, series[i].smooth, series[i].data_path, &series[i].n, &err) != 0)
            status = 1;
    }
    char plots[4200], png[4400];
    if (!status && out) {
        if (render(tmp_dir, out, series, n, run_dir, &err) != 0) status = 1;
        else printf("%s\n", out);
    } else if (!status) {
        snprintf(plots, sizeof plots, "%s/plots", run_dir);
        if (cpt_mkdir_p(plots, 0700, &err) != 0) status = 1;
        snprintf(png, sizeof png, "%s/overview.png", plots);
        if (!status && render(tmp_dir, png, series, n, run_dir, &err) != 0) status = 1;
        if (!status) printf("%s\n", png);
        for (int i = 0; i < n && !status; i++) {
            char fname[256];
            series_file_name(series, i, fname, sizeof fname);
            snprintf(png, sizeof png, "%s/%s.png", plots, fname);
            if (render(tmp_dir, png, &series[i], 1, run_dir, &err) != 0) status = 1;
            else printf("%s\n", png);
            /* the numbers drawn, for a reader without an image viewer */
            char tsv[4400], tmp_tsv[4500];
            size_t n_tsv;
            snprintf(tsv, sizeof tsv, "%s/%s.tsv", plots, fname);
            snprintf(tmp_tsv, sizeof tmp_tsv, "%s.tmp%ld", tsv, (long)getpid());
            if (!status && (write_series(metrics, series[i].key, series[i].smooth, tmp_tsv, &n_tsv, &err) != 0 ||
                            rename(tmp_tsv, tsv) != 0)) {
                if (!err.msg[0]) cpt_errno(&err, "%s", tsv);
                unlink(tmp_tsv);
                status = 1;
            }
        }
    }
    if (status) fprintf(stderr, "cpt plot: %s\n", err.msg);
    else
        for (int i = 0; i < n; i++) fprintf(stderr, "cpt plot: %s: %zu points\n", series[i].key, series[i].n);
    cpt_err e2;
    cpt_remove_tree(tmp_dir, &e2);
    return status;
}
