/* SFT data: JSONL -> ids + loss mask with the tiny tokenizer. Raw prompt/completion: the loss covers the completion
 * and the appended eos only. ChatML messages: the loss covers the assistant reply and its <|im_end|>, nothing of
 * the user turn, and the last answer's span decodes to the reply. A bad line names file:line. */
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
