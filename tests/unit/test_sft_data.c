/* SFT data: JSONL -> ids + loss mask with the tiny tokenizer. Raw prompt/completion: the loss covers the completion
 * and the appended eos only. ChatML messages: the loss covers the assistant reply and its <|im_end|>, nothing of
 * the user turn, and the last answer's span decodes to the reply. Raw segments (a tool call's transcript): each
 * text encoded on its own, the loss on the trained texts and the eos, never on the observation. A bad line names
 * file:line. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "core/fs.h"
#include "tests/check.h"
#include "trainer/sft_data.h"

#define TOK "examples/tiny-tokenizer"

static char *decode(const cpt_tokenizer *tok, const int32_t *ids, int n, int skip) {
    cpt_err err;
    size_t len;
    char *s = cpt_tokenizer_decode(tok, ids, (size_t)n, skip, &len, &err);
    return s ? s : strdup("(decode failed)");
}

int main(void) {
    cpt_err err;
    cpt_tokenizer *tok = cpt_tokenizer_load(TOK, &err);
    CHECK_MSG(tok != NULL, "%s", err.msg);
    if (!tok) return check_summary("test_sft_data");
    char dir[] = "/tmp/cpt-test-sftdata-XXXXXX";
    CHECK(mkdtemp(dir) != NULL);
    char pc[256], msg[256], bad[256];
    snprintf(pc, sizeof pc, "%s/pc.jsonl", dir);
    snprintf(msg, sizeof msg, "%s/msg.jsonl", dir);
    snprintf(bad, sizeof bad, "%s/bad.jsonl", dir);
    const char *pc_text = "{\"prompt\": \"12+34=\", \"completion\": \"46\"}\n\n{\"prompt\": \"7*8=\", \"completion\": \"56\"}\n";
    const char *msg_text =
        "{\"messages\": [{\"role\": \"user\", \"content\": \"What is 2 + 3?\"}, "
        "{\"role\": \"assistant\", \"content\": \"2 + 3 = 5\\n#### 5\"}]}\n";
    CHECK_EQ_INT(cpt_write_file_atomic(pc, pc_text, strlen(pc_text), &err), 0);
    CHECK_EQ_INT(cpt_write_file_atomic(msg, msg_text, strlen(msg_text), &err), 0);
    const char *bad_text = "{\"prompt\": \"1+1=\", \"completion\": \"2\"}\n{\"prompt\": \"1+1=\"}\n";
    CHECK_EQ_INT(cpt_write_file_atomic(bad, bad_text, strlen(bad_text), &err), 0);

    int32_t eos = cpt_tokenizer_token_id(tok, "<|endoftext|>");
    CHECK(eos >= 0);
    cpt_sft_data_opts o = {.format = "auto", .tok = tok, .tpl = NULL, .max_seq_len = 64, .eos_id = eos};
    cpt_sft_dataset ds;
    CHECK_EQ_INT(cpt_sft_dataset_load(pc, &o, &ds, &err), 0);
    CHECK_EQ_INT(ds.n, 2);
    if (ds.n == 2) {
        cpt_sft_example *e = &ds.ex[0];
        /* "12+34=" then "46" then eos; the loss covers "46" + eos */
        CHECK_EQ_INT(e->ids[e->n - 1], eos);
        int n_loss = 0;
        for (int i = 0; i < e->n; i++) n_loss += e->mask[i];
        char *prompt = decode(tok, e->ids, e->n_prompt, 0);
        CHECK_EQ_STR(prompt, "12+34=");
        char *ans = decode(tok, e->ids + e->n_prompt, e->n_answer, 1);
        CHECK_EQ_STR(ans, "46");
        CHECK_EQ_INT(n_loss, e->n_answer);
        CHECK_EQ_INT(e->n_prompt + e->n_answer, e->n);
        free(prompt);
        free(ans);
    }
    cpt_sft_dataset_free(&ds);

    /* truncation */
    o.max_seq_len = 8; /* "12+34=46<eos>" is 9 tokens, "7*8=56<eos>" 7 */
    CHECK_EQ_INT(cpt_sft_dataset_load(pc, &o, &ds, &err), 0);
    CHECK_EQ_INT(ds.n_truncated, 1);
    CHECK_EQ_INT(ds.n, 2);
    for (size_t i = 0; i < ds.n; i++) CHECK(ds.ex[i].n <= 8);
    cpt_sft_dataset_free(&ds);
    o.max_seq_len = 64;

    /* segments: prompt, call (trained), observation (not trained), answer (trained), eos */
    char seg[256];
    snprintf(seg, sizeof seg, "%s/seg.jsonl", dir);
    const char *seg_text =
        "{\"prompt\": \"What is 47 * 86?\", \"answer\": \"4042\", \"segments\": ["
        "{\"text\": \"<tool_call>47*86</tool_call>\", \"train\": true}, "
        "{\"text\": \"\\n<tool_response>4042</tool_response>\\n\", \"train\": false}, "
        "{\"text\": \"#### 4042\", \"train\": true}]}\n"
        "{\"prompt\": \"What is 12 * 10?\", \"answer\": \"120\", \"segments\": [{\"text\": \"#### 120\", \"train\": true}]}\n";
    CHECK_EQ_INT(cpt_write_file_atomic(seg, seg_text, strlen(seg_text), &err), 0);
    o.max_seq_len = 128; /* the tiny tokenizer spells the markup out: 71 tokens */
    CHECK_EQ_INT(cpt_sft_dataset_load(seg, &o, &ds, &err), 0);
    CHECK_EQ_INT(ds.n, 2);
    if (ds.n == 2) {
        const char *texts[] = {"What is 47 * 86?", "<tool_call>47*86</tool_call>", "\n<tool_response>4042</tool_response>\n",
                               "#### 4042"};
        const uint8_t train[] = {0, 1, 0, 1};
        int32_t want[128];
        uint8_t want_mask[128];
        int nw = 0;
        for (int k = 0; k < 4; k++) {
            int32_t *t = NULL;
            long nt = cpt_tokenizer_encode(tok, texts[k], strlen(texts[k]), &t, &err);
            CHECK(nt > 0 && nw + nt < 127);
            for (long j = 0; j < nt && nw < 127; j++) {
                want[nw] = t[j];
                want_mask[nw++] = train[k];
            }
            free(t);
        }
        want[nw] = eos;
        want_mask[nw++] = 1;
        cpt_sft_example *e = &ds.ex[0];
        CHECK_EQ_INT(e->n, nw);
        int same = e->n == nw;
        for (int i = 0; same && i < nw; i++) same = e->ids[i] == want[i] && e->mask[i] == want_mask[i];
        CHECK_MSG(same, "segments are not encoded one by one with their masks");
        char *ans = decode(tok, e->ids + e->n_prompt, e->n_answer, 1);
        CHECK_EQ_STR(ans, "#### 4042");
        free(ans);
        char *ctx = decode(tok, e->ids, e->n_prompt, 0);
        CHECK_EQ_STR(ctx, "What is 47 * 86?<tool_call>47*86</tool_call>\n<tool_response>4042</tool_response>\n");
        free(ctx);
        char *direct = decode(tok, ds.ex[1].ids + ds.ex[1].n_prompt, ds.ex[1].n_answer, 1);
        CHECK_EQ_STR(direct, "#### 120");
        free(direct);
    }
    cpt_sft_dataset_free(&ds);
    const char *seg_bad = "{\"prompt\": \"p\", \"answer\": \"1\", \"segments\": [{\"text\": \"1\"}]}\n";
    CHECK_EQ_INT(cpt_write_file_atomic(seg, seg_bad, strlen(seg_bad), &err), 0);
    CHECK_EQ_INT(cpt_sft_dataset_load(seg, &o, &ds, &err), -1);
    CHECK_MSG(strstr(err.msg, "seg.jsonl:1") && strstr(err.msg, "'segments' [0]"), "%s", err.msg);
    o.max_seq_len = 64;

    /* messages need a template */
    CHECK_EQ_INT(cpt_sft_dataset_load(msg, &o, &ds, &err), -1);
    CHECK(strstr(err.msg, "msg.jsonl:1") && strstr(err.msg, "chat template"));

    cpt_chat_template tpl;
    CHECK_EQ_INT(cpt_chat_template_load(TOK, "chatml", &tpl, &err), 0);
    o.tpl = &tpl;
    CHECK_EQ_INT(cpt_sft_dataset_load(msg, &o, &ds, &err), 0);
    CHECK_EQ_INT(ds.n, 1);
    if (ds.n == 1) {
        cpt_sft_example *e = &ds.ex[0];
        char *all = decode(tok, e->ids, e->n, 0);
        CHECK_EQ_STR(all, "<|im_start|>user\nWhat is 2 + 3?<|im_end|>\n<|im_start|>assistant\n2 + 3 = 5\n#### 5<|im_end|>\n");
        char *prompt = decode(tok, e->ids, e->n_prompt, 0);
        CHECK_EQ_STR(prompt, "<|im_start|>user\nWhat is 2 + 3?<|im_end|>\n<|im_start|>assistant\n");
        char *ans = decode(tok, e->ids + e->n_prompt, e->n_answer, 0);
        CHECK_EQ_STR(ans, "2 + 3 = 5\n#### 5<|im_end|>");
        /* nothing of the user turn is learned */
        int user_masked = 0;
        for (int i = 0; i < e->n_prompt; i++) user_masked += e->mask[i];
        CHECK_EQ_INT(user_masked, 0);
        free(all);
        free(prompt);
        free(ans);
    }
    cpt_sft_dataset_free(&ds);
    /* segments are raw text only */
    CHECK_EQ_INT(cpt_write_file_atomic(seg, seg_text, strlen(seg_text), &err), 0);
    CHECK_EQ_INT(cpt_sft_dataset_load(seg, &o, &ds, &err), -1);
    CHECK_MSG(strstr(err.msg, "seg.jsonl:1") && strstr(err.msg, "chat_template"), "%s", err.msg);
    /* prompt/completion through the template: the completion is the assistant turn */
    CHECK_EQ_INT(cpt_sft_dataset_load(pc, &o, &ds, &err), 0);
    if (ds.n == 2) {
        char *ans = decode(tok, ds.ex[1].ids + ds.ex[1].n_prompt, ds.ex[1].n_answer, 1);
        CHECK_EQ_STR(ans, "56");
        free(ans);
    }
    cpt_sft_dataset_free(&ds);

    /* a bad line names the file and line, unless skipped */
    o.tpl = NULL;
    CHECK_EQ_INT(cpt_sft_dataset_load(bad, &o, &ds, &err), -1);
    CHECK_MSG(strstr(err.msg, "bad.jsonl:2") != NULL, "%s", err.msg);
    o.skip_bad_lines = 1;
    CHECK_EQ_INT(cpt_sft_dataset_load(bad, &o, &ds, &err), 0);
    CHECK_EQ_INT(ds.n, 1);
    CHECK_EQ_INT(ds.n_skipped, 1);
    cpt_sft_dataset_free(&ds);

    cpt_chat_template_free(&tpl);
    cpt_tokenizer_free(tok);
    cpt_remove_tree(dir, &err);
    return check_summary("test_sft_data");
}
