/* cpt-rollout with tools (env.type set) against a real redis-server, the test playing the env worker: it reads the
 * env requests of cpt:RUN:env (consumer group env) and replies on cpt:RUN:env:WORKER. The tiny tokenizer and a
 * random model, with env.call_end = "e" (the last byte of one token in ten) so that calls happen. Checked on the
 * rollout groups: each completion is the model's turn 1, the observation of the reply sent for call 1 (mask 0,
 * logprob 0), the model's turn 2, ...; each call's text is its turn's bytes; the model's logprobs equal a forward
 * pass over the whole sequence; no call past env.max_turns; a call never answered gets the timeout observation; a
 * reply sent twice is used once; replies for another group or malformed ones are dropped; the worker deletes its
 * reply stream when it exits. Then without tools (env.type = none) and rollout.stop = ["e"]: a sample ends at its
 * first call. */
#include <math.h>
#include <signal.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <unistd.h>

#include "core/tokenizer.h"
#include "model/model.h"
#include "queue/env_msg.h"
#include "rollout/turns.h"
#include "tests/check.h"
#include "tests/integration/redis_helper.h"
#include "tests/tiny_model.h"

#define RUN "rt"
#define WID "wt"
#define TPL "\n<tool_response>{observation}</tool_response>\n"
enum { NGROUPS = 3, G = 3, NEW = 64, NP = 6, MAXT = 2, MAXCALLS = 256 };

static test_redis T;
static char CONFIG[256];
static cpt_tokenizer *tok;
static cpt_model *model;

/* What the test (the env worker) saw and answered. */
typedef struct call {
    uint64_t index;
    uint32_t sample, turn;
    char text[1024];
    char answer[64]; /* "": not answered */
} call;
static call calls[MAXCALLS];
static int n_calls;

static const char *extra_of(uint64_t index) {
    static char b[NGROUPS][32];
    snprintf(b[index], sizeof b[index], "{\"g\":%llu}", (unsigned long long)index);
    return b[index];
}

static void add_group(cpt_queue *q, uint64_t epoch, uint64_t index) {
    int32_t prompt[NP];
    for (int i = 0; i < NP; i++) prompt[i] = (int32_t)((index * 131 + (uint64_t)i * 37 + 11) % 700);
    cpt_prompt_group g;
    memset(&g, 0, sizeof g);
    snprintf(g.run, sizeof g.run, RUN);
    g.id = (cpt_group_id){epoch, index};
    g.n_prompt = NP;
    g.prompt = prompt;
    g.n_samples = G;
    g.sampling = (cpt_sampling){.temperature = 1.0f, .top_p = 1.0f, .max_new_tokens = NEW, .seed = 40 + index};
    g.extra = (char *)extra_of(index);
    cpt_buf b;
    cpt_err err;
    CHECK_MSG(cpt_prompt_group_encode(&g, &b, &err) == 0, "%s", err.msg);
    CHECK_MSG(cpt_queue_add(q, CPT_STREAM_PROMPTS, b.data, b.len, NULL, &err) == 0, "%s", err.msg);
    cpt_buf_free(&b);
}

static pid_t start_worker(const char *config, const char *id) {
    char log[300];
    snprintf(log, sizeof log, "%s/%s.log", T.dir, id);
    pid_t pid = fork();
    if (pid == 0) {
        FILE *f = freopen(log, "w", stderr);
        (void)f;
        setenv("CPT_RUN", T.dir, 1);
        setenv("CPT_LOG", "debug", 1);
        char exe[512];
        snprintf(exe, sizeof exe, "%s/cpt-rollout", getenv("CPT_BUILD") ? getenv("CPT_BUILD") : "build");
        execl(exe, "cpt-rollout", config, "--worker-id", id, (char *)NULL);
        perror("exec cpt-rollout");
        _exit(127);
    }
    return pid;
}

static void reply(cpt_queue *q, uint64_t index, uint32_t sample, uint32_t turn, const char *obs) {
    cpt_env_reply r = {.run = RUN, .id = {0, index}, .sample = sample, .turn = turn, .ok = 1,
                       .observation = (char *)obs, .env = "test-env"};
    cpt_buf b;
    cpt_err err;
    CHECK_MSG(cpt_env_reply_encode(&r, &b, &err) == 0, "%s", err.msg);
    char key[CPT_ENV_KEY_MAX];
    cpt_env_reply_stream(RUN, WID, key);
    const char *argv[] = {"XADD", key, "MAXLEN", "~", "10000", "*", "m", b.data};
    size_t lens[] = {4, strlen(key), 6, 1, 5, 1, 1, b.len};
    redisReply *rr = cpt_redis_command(q->redis, 8, argv, lens, key, 0, &err);
    CHECK_MSG(rr != NULL, "%s", err.msg);
    if (rr) freeReplyObject(rr);
    cpt_buf_free(&b);
}

static void raw_reply(cpt_queue *q, const char *bytes, size_t n) {
    char key[CPT_ENV_KEY_MAX];
    cpt_env_reply_stream(RUN, WID, key);
    const char *argv[] = {"XADD", key, "*", "m", bytes};
    size_t lens[] = {4, strlen(key), 1, 1, n};
    cpt_err err;
    redisReply *rr = cpt_redis_command(q->redis, 5, argv, lens, key, 0, &err);
    if (rr) freeReplyObject(rr);
}

/* Plays the env worker for one read: answers every request (but group 1's sample 0 call 1: never; group 2's:
 * twice, the second with "DUP"). */
static void serve(cpt_queue *q) {
    char key[CPT_ENV_KEY_MAX];
    cpt_env_stream(RUN, key);
    const char *argv[] = {"XREADGROUP", "GROUP", CPT_ENV_GROUP, "test-env", "COUNT", "32", "BLOCK", "50",
                          "STREAMS", key, ">"};
    cpt_err err;
    redisReply *r = cpt_redis_command(q->redis, 11, argv, NULL, key, 50, &err);
    if (!r) return; /* the group does not exist before the worker makes it */
    if (r->type == REDIS_REPLY_ARRAY && r->elements == 1) {
        redisReply *es = r->element[0]->element[1];
        for (size_t j = 0; j < es->elements; j++) {
            redisReply *e = es->element[j], *kv = e->element[1];
            cpt_env_request rq;
            CHECK_EQ_INT(kv->elements, 2);
            if (kv->elements != 2 || cpt_env_request_decode(kv->element[1]->str, kv->element[1]->len, &rq, &err)) {
                CHECK_MSG(0, "a request that does not decode: %s", err.msg);
                continue;
            }
            CHECK_EQ_STR(rq.worker, WID);
            CHECK(rq.id.index < NGROUPS && rq.sample < G && rq.turn >= 1 && rq.turn <= MAXT);
            CHECK_EQ_STR(rq.extra, extra_of(rq.id.index < NGROUPS ? rq.id.index : 0));
            CHECK(rq.call[strlen(rq.call) - 1] == 'e');
            for (int k = 0; k < n_calls; k++)
                CHECK_MSG(!(calls[k].index == rq.id.index && calls[k].sample == rq.sample && calls[k].turn == rq.turn),
                          "call (%llu, %u, %u) sent twice", (unsigned long long)rq.id.index, rq.sample, rq.turn);
            if (n_calls < MAXCALLS) {
                call *c = &calls[n_calls++];
                c->index = rq.id.index, c->sample = rq.sample, c->turn = rq.turn;
                snprintf(c->text, sizeof c->text, "%s", rq.call);
                if (!(rq.id.index == 1 && rq.sample == 0 && rq.turn == 1)) {
                    snprintf(c->answer, sizeof c->answer, "v%llus%ut%u", (unsigned long long)rq.id.index, rq.sample,
                             rq.turn);
                    reply(q, rq.id.index, rq.sample, rq.turn, c->answer);
                    if (rq.id.index == 2) reply(q, rq.id.index, rq.sample, rq.turn, "DUP");
                }
            }
            const char *ack[] = {"XACK", key, CPT_ENV_GROUP, e->element[0]->str};
            long long n;
            cpt_redis_integer(q->redis, 4, ack, key, &n, &err);
            cpt_env_request_free(&rq);
        }
    }
    freeReplyObject(r);
}

static const call *find_call(uint64_t index, uint32_t sample, uint32_t turn) {
    for (int k = 0; k < n_calls; k++)
        if (calls[k].index == index && calls[k].sample == sample && calls[k].turn == turn) return &calls[k];
    return NULL;
}

static char *bytes_of(const int32_t *ids, int n) {
    size_t total = 0, len;
    for (int i = 0; i < n; i++) total += cpt_tokenizer_id_bytes(tok, ids[i], &len) ? len : 0;
    char *out = malloc(total + 1), *w = out;
    for (int i = 0; i < n; i++) {
        const char *b = cpt_tokenizer_id_bytes(tok, ids[i], &len);
        for (size_t j = 0; b && j < len; j++)
            if (b[j]) *w++ = b[j];
    }
    *w = 0;
    return out;
}

static double logprob_gap(const cpt_rollout_group *g, const cpt_completion *c) {
    int n = (int)(g->n_prompt + c->n_tokens);
    int32_t *tk = malloc(sizeof(int32_t) * n), *tgt = malloc(sizeof(int32_t) * n), st[2] = {0, n};
    float *lp = malloc(sizeof(float) * n);
    memcpy(tk, g->prompt, sizeof(int32_t) * g->n_prompt);
    memcpy(tk + g->n_prompt, c->tokens, sizeof(int32_t) * c->n_tokens);
    for (int i = 0; i < n; i++) tgt[i] = i + 1 < n ? tk[i + 1] : -1;
    cpt_batch b = {n, 1, tk, st, tgt};
    cpt_forward_out out = {.logprobs = lp};
    cpt_err err;
    double worst = cpt_model_forward(model, &b, &out, 0, &err) ? 1e9 : 0;
    for (uint32_t i = 0; i < c->n_tokens; i++)
        if (!c->mask || c->mask[i]) worst = fmax(worst, fabs((double)c->logprobs[i] - lp[g->n_prompt - 1 + i]));
    free(tk), free(tgt), free(lp);
    return worst;
}

/* One completion against the calls the env side saw. Returns its calls. */
static int check_completion(const cpt_rollout_group *g, uint32_t k, int *timeouts) {
    const cpt_completion *c = &g->completions[k];
    CHECK(c->n_tokens <= NEW);
    CHECK_MSG(logprob_gap(g, c) < 1e-4, "group %llu sample %u: logprob gap %g", (unsigned long long)g->id.index, k,
              logprob_gap(g, c));
    uint32_t i = 0, turn = 0;
    while (i < c->n_tokens) {
        uint32_t j = i;
        while (j < c->n_tokens && (!c->mask || c->mask[j])) j++;
        if (j == c->n_tokens) break;
        turn++;
        const call *cl = find_call(g->id.index, k, turn);
        CHECK_MSG(cl != NULL, "group %llu sample %u: an observation for call %u that was never requested",
                  (unsigned long long)g->id.index, k, turn);
        char *text = bytes_of(c->tokens + i, (int)(j - i));
        if (cl) CHECK_EQ_STR(text, cl->text);
        free(text);
        uint32_t e = j;
        for (; e < c->n_tokens && !c->mask[e]; e++) CHECK(c->logprobs[e] == 0.0f);
        const char *ans = cl && cl->answer[0] ? cl->answer : CPT_TURN_TIMEOUT_OBS;
        if (cl && !cl->answer[0]) (*timeouts)++;
        char *want = cpt_turn_format_observation(TPL, ans);
        int32_t *ids;
        cpt_err err;
        long nw = cpt_tokenizer_encode(tok, want, strlen(want), &ids, &err);
        free(want);
        if ((long)(e - j) < nw) CHECK(e == c->n_tokens && c->finish == CPT_FINISH_LENGTH);
        else CHECK_EQ_INT(e - j, nw);
        CHECK_MSG(!memcmp(c->tokens + j, ids, sizeof(int32_t) * (e - j)),
                  "group %llu sample %u call %u: the observation's tokens", (unsigned long long)g->id.index, k, turn);
        free(ids);
        i = e;
    }
    /* every call the env side saw for this sample shows up */
    int seen = 0;
    for (int n = 0; n < n_calls; n++) seen += calls[n].index == g->id.index && calls[n].sample == k;
    CHECK_EQ_INT(seen, (int)turn);
    return (int)turn;
}

static int log_has(const char *text) {
    char p[300];
    snprintf(p, sizeof p, "%s/%s.log", T.dir, WID);
    FILE *f = fopen(p, "r");
    if (!f) return 0;
    char line[4096];
    int found = 0;
    while (!found && fgets(line, sizeof line, f)) found = strstr(line, text) != NULL;
    fclose(f);
    return found;
}

/* Without tools (env.type = none) and rollout.stop = ["e"]: a sample ends at its first call, with no mask, and
 * nothing goes to the env stream. */
static void without_tools(cpt_queue *q) {
    char cfg[300], key[CPT_ENV_KEY_MAX];
    snprintf(cfg, sizeof cfg, "%s/none.toml", T.dir);
    FILE *f = fopen(CONFIG, "r"), *o = fopen(cfg, "w");
    char line[1024];
    while (f && o && fgets(line, sizeof line, f)) {
        if (!strncmp(line, "type = \"calculator\"", 19)) snprintf(line, sizeof line, "type = \"none\"\n");
        if (!strncmp(line, "[rollout]", 9)) {
            fputs(line, o);
            snprintf(line, sizeof line, "stop = [\"e\"]\n");
        }
        fputs(line, o);
    }
    if (f) fclose(f);
    if (o) fclose(o);
    const char *xl[] = {"XLEN", cpt_env_stream(RUN, key)};
    long long before = test_int(q, 2, xl);
    add_group(q, 1, 0); /* a new group id: the checker drops one it has seen */
    pid_t pid = start_worker(cfg, "wn");
    cpt_queue_item it;
    cpt_err err;
    int got = 0;
    double t0 = cpt_now();
    while (!got && cpt_now() - t0 < 60)
        if (cpt_queue_next(q, CPT_STREAM_ROLLOUTS, "check", "checker", &it, &err) == 1) got = 1;
    CHECK(got);
    if (got) {
        cpt_queue_done(q, &it, &err);
        int ended = 0;
        for (uint32_t k = 0; k < it.rollout.n_completions; k++) {
            const cpt_completion *c = &it.rollout.completions[k];
            CHECK(c->mask == NULL);
            char *b = bytes_of(c->tokens, (int)c->n_tokens);
            int at_e = c->n_tokens > 0 && b[strlen(b) - 1] == 'e';
            CHECK_MSG((c->finish == CPT_FINISH_STOP && at_e) || c->finish == CPT_FINISH_LENGTH,
                      "sample %u: finish %d, \"%s\"", k, (int)c->finish, b);
            ended += at_e;
            free(b);
            /* it stopped at its first call: no earlier token ends the call string */
            for (uint32_t i = 0; i + 1 < c->n_tokens; i++) {
                size_t len;
                const char *tb = cpt_tokenizer_id_bytes(tok, c->tokens[i], &len);
                CHECK_MSG(!(tb && len && tb[len - 1] == 'e'), "sample %u: token %u ends in the call string", k, i);
            }
        }
        CHECK(ended > 0);
        cpt_queue_item_free(&it);
    }
    CHECK_EQ_INT(test_int(q, 2, xl), before);
    kill(pid, SIGTERM);
    int status = 0;
    double t1 = cpt_now();
    while (waitpid(pid, &status, WNOHANG) != pid && cpt_now() - t1 < 30) usleep(20000);
    CHECK(WIFEXITED(status) && WEXITSTATUS(status) == 0);
}

int main(void) {
    cpt_err err;
    tok = cpt_tokenizer_load("examples/tiny-tokenizer", &err);
    if (!tok) {
        fprintf(stderr, "%s\n", err.msg);
        return 1;
    }
    test_redis_start(&T, "no");
    model = tiny_model_new(cpt_tokenizer_vocab_size(tok), 2, 11);
    char base_dir[300], cwd[1024];
    snprintf(base_dir, sizeof base_dir, "%s/base", T.dir);
    CHECK_MSG(cpt_model_save_hf(model, base_dir, 0, &err) == 0, "%s", err.msg);
    if (!getcwd(cwd, sizeof cwd)) return 1;
    snprintf(CONFIG, sizeof CONFIG, "%s/config.toml", T.dir);
    FILE *f = fopen(CONFIG, "w");
    fprintf(f,
            "[run]\nname = \"%s\"\ndir = \"%s\"\n[model]\npath = \"%s\"\n[tokenizer]\npath = \"%s/examples/tiny-tokenizer\"\n"
            "[data]\nchat_template = \"none\"\n"
            "[queue]\nurl = \"%s\"\nclaim_idle_ms = 30000\nblock_ms = 100\n"
            "[rollout]\nslots = 4\nweight_poll_ms = 50\nheartbeat_s = 0.2\nstop_on_eos = false\nthreads = 1\n"
            "[env]\ntype = \"calculator\"\nmax_turns = %d\ncall_start = \"\"\ncall_end = \"e\"\nreply_timeout_ms = 5000\n",
            RUN, T.dir, base_dir, cwd, T.srv.url, MAXT);
    fclose(f);
    cpt_queue *q = test_queue_open(&T, RUN, 1000, 30000);
    CHECK_EQ_INT(cpt_queue_create_group(q, CPT_STREAM_ROLLOUTS, "check", &err), 0);
    CHECK_EQ_INT(cpt_queue_create_group(q, CPT_STREAM_PROMPTS, "rollout", &err), 0);
    for (uint64_t i = 0; i < NGROUPS; i++) add_group(q, 0, i);
    pid_t pid = start_worker(CONFIG, WID);
    /* replies the worker must drop: another group's, and bytes that are no reply */
    int junk_sent = 0;
    cpt_rollout_group got[NGROUPS];
    cpt_queue_item items[NGROUPS];
    int n_got = 0;
    double t0 = cpt_now();
    while (n_got < NGROUPS && cpt_now() - t0 < 90) {
        serve(q);
        if (!junk_sent && n_calls > 0) {
            reply(q, 99 % NGROUPS + 100, 0, 1, "unknown group");
            raw_reply(q, "\x81\xa1x\x01", 4);
            junk_sent = 1;
        }
        cpt_queue_item it;
        if (cpt_queue_next(q, CPT_STREAM_ROLLOUTS, "check", "checker", &it, &err) == 1) {
            cpt_queue_done(q, &it, &err);
            items[n_got] = it;
            got[n_got++] = it.rollout;
        }
    }
    CHECK_EQ_INT(n_got, NGROUPS);
    int total = 0, timeouts = 0, masked = 0;
    for (int g = 0; g < n_got; g++) {
        CHECK_EQ_INT(got[g].n_completions, G);
        CHECK_EQ_STR(got[g].extra, extra_of(got[g].id.index));
        for (uint32_t k = 0; k < got[g].n_completions; k++) {
            total += check_completion(&got[g], k, &timeouts);
            masked += got[g].completions[k].mask != NULL;
        }
    }
    fprintf(stderr, "%d groups, %d calls (%d timed out), %d completions with observations\n", n_got, n_calls, timeouts,
            masked);
    CHECK_EQ_INT(total, n_calls);
    CHECK_MSG(n_calls >= NGROUPS * G / 2, "only %d calls", n_calls);
    CHECK(masked > 0);
    CHECK_MSG(find_call(1, 0, 1) != NULL && timeouts == 1, "timeouts %d", timeouts);
    int twice = 0;
    for (int k = 0; k < n_calls; k++) twice += calls[k].turn == MAXT;
    CHECK_MSG(twice > 0, "no sample made %d calls", MAXT);
    for (int g = 0; g < n_got; g++) cpt_queue_item_free(&items[g]);

    /* SIGTERM: drains, exits 0 and deletes its reply stream */
    kill(pid, SIGTERM);
    int status = 0;
    double t1 = cpt_now();
    while (waitpid(pid, &status, WNOHANG) != pid && cpt_now() - t1 < 30) usleep(20000);
    CHECK(WIFEXITED(status) && WEXITSTATUS(status) == 0);
    char key[CPT_ENV_KEY_MAX];
    const char *ex[] = {"EXISTS", cpt_env_reply_stream(RUN, WID, key)};
    CHECK_EQ_INT(test_int(q, 2, ex), 0);
    /* group 2's duplicates, the unknown group's reply and the malformed one were dropped */
    int dup2 = 0;
    for (int k = 0; k < n_calls; k++) dup2 += calls[k].index == 2 && calls[k].answer[0];
    char want[96];
    snprintf(want, sizeof want, "tools: %d replies taken, %d dropped", n_calls - timeouts, dup2 + 2);
    CHECK_MSG(log_has(want), "the log lacks \"%s\"", want);
    CHECK(log_has("malformed env reply dropped"));
    without_tools(q);
    cpt_queue_close(q);
    cpt_model_free(model);
    cpt_tokenizer_free(tok);
    int rc = check_summary("test_rollout_turns");
    if (!rc) test_redis_stop(&T);
    else fprintf(stderr, "logs kept in %s\n", T.dir);
    return rc;
}
