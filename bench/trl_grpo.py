#!/usr/bin/env python3
"""The GRPO run of bench/rl_learning.sh in TRL's GRPOTrainer (issue 22: TRL side by side), on one GPU.

On the GPU machine, with the TRL sources carried (here: `bash bench/trl_carry.sh`, which fills .carry-trl; carry
that path):
  PYTHONPATH=.carry-trl python3 bench/trl_grpo.py --model EXPORT_DIR --prompts RL.jsonl --eval EVAL.jsonl \
    --group-size G --prompts-per-step P --steps N --lr LR --mini-batches M --clip-low 0.2 --clip-high 0.28 \
    --temperature T --max-new-tokens K --seed S --out DIR [--impl trl|torch|auto]
Here, without torch: the same command with --check validates the arguments, loads the JSONL files, builds the
prompts and scores sample completions with the reward (so a typo fails here, not on the GPU).

What it matches in cpt (a run with data.chat_template = "none", reward.type = "math", algo GRPO, kl_beta 0):
- prompt: the record's "prompt" text encoded as is, no BOS or template (trainer/rl_data.c, core/tokenizer_encode.c:
  the post_processor is not applied; TRL gets a tokenizer whose __call__ defaults to add_special_tokens=False
  when the two differ); the completion stops at the model's or the tokenizer's EOS (rollout.stop_on_eos) or after
  K tokens; the EOS token is part of the completion and of the loss; the text graded is the decoded completion
  without special tokens.
- reward: bench/cpt_math_reward.py (cpt's math reward; tests/e2e/test_trl_reward.sh checks it against cpt).
- objective: G samples a prompt, P prompts a step, advantages (r - mean) / (std + eps) per group (unbiased std),
  ratio clipped to [1 - clip_low, 1 + clip_high], token-mean over each update's tokens, no KL, M optimizer updates
  a step of P/M prompts each, the proximal policy the weights before the step's first update; AdamW (0.9, 0.999,
  1e-8), constant lr, no warmup, weight decay 0, gradient norm clipped at 1.0; fp32 master weights with bf16
  autocast (cpt's GPU trainer: bf16 compute, fp32 master weights and optimizer).
- TRL settings: loss_type "bnpo" with no gradient accumulation (the token mean of each update's own tokens; TRL's
  "dapo" divides by the whole step's tokens, so each of M updates would be M times smaller), scale_rewards
  "group", beta 0, num_iterations 1, steps_per_generation M, per-device batch P*G/M completions, max_steps N*M.
  Known differences, recorded in summary.json: TRL's advantage epsilon is 1e-4 (cpt 1e-6); TRL divides the
  logits by the temperature when it takes logprobs for the loss (cpt does not; equal at T = 1); TRL's mini-batches
  are shuffled completions (cpt: whole groups in order by default; train.mini_batch_shuffle = true as TRL).
- --impl torch: the same GRPO written here from the published formulas (the fallback the issue names); it follows
  cpt exactly where TRL differs (epsilon, no temperature in the loss, whole groups per mini-batch).
The prompt ids are compared with `cpt tokenize` on every prompt when a cpt binary is found (--cpt, else build/cpt or
build-cuda/cpt); a difference stops the run before training.
Outputs in --out: metrics.jsonl ({"step":k,"reward/mean":x,"time":unix_s} per step; {"step":k,"val/accuracy":a}
before training (step 0) and at the end (step N), greedy with the same K), summary.json (impl, versions, wall_s,
train_s, why TRL was not used if it was not).
"""
import argparse
import json
import os
import platform
import random
import signal
import sys
import time
import traceback

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import cpt_math_reward  # noqa: E402  (bench/, no third-party imports)

ADV_EPS = 1e-6  # cpt's algo.adv_eps
ADAM = dict(betas=(0.9, 0.999), eps=1e-8, weight_decay=0.0)  # cpt's optim.* defaults with weight_decay 0
GRAD_CLIP = 1.0


# ---- arguments and data (no torch) ----

def parse_args(argv):
    p = argparse.ArgumentParser(description="GRPO in TRL (or plain PyTorch) matching a cpt run, for issue 22.")
    p.add_argument("--model", required=True, help="a `cpt export` folder (config.json, weights, tokenizer)")
    p.add_argument("--prompts", required=True, help="RL prompts JSONL: {\"prompt\": TEXT, \"answer\": GOLD}")
    p.add_argument("--eval", required=True, help="held-out JSONL, same fields; greedy accuracy before and after")
    p.add_argument("--group-size", type=int, required=True, help="G: samples per prompt")
    p.add_argument("--prompts-per-step", type=int, required=True, help="P: prompts (groups) per step")
    p.add_argument("--steps", type=int, required=True, help="N: steps (rollout batches)")
    p.add_argument("--lr", type=float, required=True)
    p.add_argument("--mini-batches", type=int, required=True, help="M: optimizer updates per step")
    p.add_argument("--clip-low", type=float, required=True)
    p.add_argument("--clip-high", type=float, required=True)
    p.add_argument("--temperature", type=float, required=True)
    p.add_argument("--max-new-tokens", type=int, required=True)
    p.add_argument("--seed", type=int, required=True)
    p.add_argument("--out", required=True)
    p.add_argument("--impl", choices=("trl", "torch", "auto"), default="auto",
                   help="auto: TRL when it imports and runs, else the plain PyTorch GRPO (reason recorded)")
    p.add_argument("--micro-batch", type=int, default=0,
                   help="torch impl: completions per forward/backward chunk (0: a whole mini-batch); the loss "
                        "stays the token mean of the whole mini-batch")
    p.add_argument("--eval-batch", type=int, default=256, help="prompts per greedy generate call")
    p.add_argument("--time-budget", type=float, default=0,
                   help="seconds of training after which the run stops at the next update, then evaluates and "
                        "writes its summary (0: none); SIGTERM (e.g. from `timeout`) does the same")
    p.add_argument("--cpt", default=None,
                   help="cpt binary whose `cpt tokenize` the prompt ids are compared with (default: build/cpt or "
                        "build-cuda/cpt when present, else no comparison)")
    p.add_argument("--check", action="store_true",
                   help="no torch: validate arguments and data, build prompts, score sample completions, exit")
    a = p.parse_args(argv)
    errs = []
    if a.group_size < 2:
        errs.append("--group-size must be at least 2 (group advantages; TRL refuses fewer)")
    if a.prompts_per_step < 1:
        errs.append("--prompts-per-step must be at least 1")
    if a.steps < 1:
        errs.append("--steps must be at least 1")
    if a.mini_batches < 1 or a.prompts_per_step % max(a.mini_batches, 1):
        errs.append(f"--mini-batches {a.mini_batches} must divide --prompts-per-step {a.prompts_per_step} "
                    "(each update takes whole groups, as cpt's train.mini_batches)")
    if not a.lr >= 0:
        errs.append("--lr must be >= 0")
    if not (0 <= a.clip_low < 1) or not a.clip_high >= 0:
        errs.append("--clip-low must be in [0, 1) and --clip-high >= 0")
    if not a.temperature > 0:
        errs.append("--temperature must be > 0 (sampling)")
    if a.max_new_tokens < 1:
        errs.append("--max-new-tokens must be at least 1")
    if a.micro_batch < 0 or a.eval_batch < 1 or not a.time_budget >= 0:
        errs.append("--micro-batch and --time-budget must be >= 0 and --eval-batch >= 1")
    if errs:
        p.error("; ".join(errs))
    return a


def load_records(path):
    """[(prompt, gold_text)] of an RL JSONL file; errors name file:line (as cpt's loader does)."""
    recs = []
    try:
        f = open(path, encoding="utf-8")
    except OSError as e:
        raise SystemExit(f"{path}: {e.strerror}")
    with f:
        for k, line in enumerate(f, 1):
            if not line.strip():
                continue
            try:
                o = json.loads(line)
            except ValueError as e:
                raise SystemExit(f"{path}:{k}: not JSON: {e}")
            if not isinstance(o, dict):
                raise SystemExit(f"{path}:{k}: not a JSON object")
            pr = o.get("prompt")
            if not isinstance(pr, str) or not pr:
                raise SystemExit(f"{path}:{k}: field 'prompt': a non-empty string is needed (chat messages need "
                                 "a chat template; this run matches data.chat_template = \"none\")")
            if "answer" not in o:
                raise SystemExit(f"{path}:{k}: field 'answer': missing")
            try:
                gold = cpt_math_reward.gold_text(o["answer"])
            except ValueError as e:
                raise SystemExit(f"{path}:{k}: {e}")
            recs.append((pr, gold))
    if not recs:
        raise SystemExit(f"{path}: no records")
    return recs


def score(completion, gold):
    return float(cpt_math_reward.grade(completion, gold)[0])


def check_records(name, recs):
    """None, or what is wrong: a completion "#### GOLD" must score 1 on every record (else the record cannot be
    rewarded) and an empty completion 0."""
    bad = [i for i, (_, g) in enumerate(recs) if score(f"#### {g}", g) != 1.0]
    if bad:
        return (f"{name}: {len(bad)} records whose own answer scores 0 as a completion "
                f"(first: record {bad[0] + 1}, answer {recs[bad[0]][1]!r})")
    if any(score("", g) != 0.0 for _, g in recs):
        return f"{name}: an empty completion scores 1"
    return None


def model_files(model_dir):
    """config.json facts the run needs, without torch: eos ids and the tokenizer files present."""
    cfg_path = os.path.join(model_dir, "config.json")
    try:
        cfg = json.load(open(cfg_path))
    except (OSError, ValueError) as e:
        raise SystemExit(f"{cfg_path}: {e}")
    tok_cfg = {}
    tc = os.path.join(model_dir, "tokenizer_config.json")
    if os.path.exists(tc):
        tok_cfg = json.load(open(tc))
    if not os.path.exists(os.path.join(model_dir, "tokenizer.json")):
        raise SystemExit(f"{model_dir}: no tokenizer.json (cpt export copies the tokenizer; pass tokenizer files)")
    weights = [f for f in os.listdir(model_dir) if f.endswith(".safetensors")]
    if not weights:
        raise SystemExit(f"{model_dir}: no .safetensors weights")
    return {"architectures": cfg.get("architectures"), "eos_token_id": cfg.get("eos_token_id"),
            "eos_token": tok_cfg.get("eos_token"), "pad_token": tok_cfg.get("pad_token"),
            "bos_token": tok_cfg.get("bos_token"), "add_bos_token": tok_cfg.get("add_bos_token")}


def find_cpt(a):
    if a.cpt:
        if not os.access(a.cpt, os.X_OK):
            raise SystemExit(f"--cpt {a.cpt}: not an executable")
        return a.cpt
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    for b in ("build/cpt", "build-cuda/cpt"):
        if os.access(os.path.join(root, b), os.X_OK):
            return os.path.join(root, b)
    return None


def cpt_prompt_ids(cpt, model_dir, prompts):
    """The ids cpt's tokenizer gives each prompt (`cpt tokenize`: raw text, no special tokens added), as cpt's
    rollout sees it with data.chat_template = "none"."""
    import subprocess
    text = "".join(json.dumps({"text": p}) + "\n" for p in prompts)
    r = subprocess.run([cpt, "tokenize", "--tokenizer", model_dir], input=text, capture_output=True, text=True)
    if r.returncode:
        raise SystemExit(f"{cpt} tokenize --tokenizer {model_dir}: {r.stderr.strip()}")
    ids = [json.loads(l)["ids"] for l in r.stdout.splitlines() if l.strip()]
    if len(ids) != len(prompts):
        raise SystemExit(f"{cpt} tokenize: {len(ids)} lines for {len(prompts)} prompts")
    return ids


def run_check(a):
    train, ev = load_records(a.prompts), load_records(a.eval)
    for msg in (check_records(a.prompts, train), check_records(a.eval, ev)):
        if msg:
            raise SystemExit(msg)
    facts = model_files(a.model)
    overlap = len({p for p, _ in train} & {p for p, _ in ev})
    samples = []
    for pr, gold in train[:3]:
        for c in (f"work\n#### {gold}", f"#### {gold}1", "I do not know"):
            samples.append({"prompt": pr, "completion": c, "gold": gold, "reward": score(c, gold)})
    os.makedirs(a.out, exist_ok=True)
    if not os.access(a.out, os.W_OK):
        raise SystemExit(f"{a.out}: not writable")
    cpt = find_cpt(a)
    ids = cpt_prompt_ids(cpt, a.model, [p for p, _ in train[:3]]) if cpt else None
    report = {"cpt": cpt, "first_prompt_ids_cpt": ids and ids[0], "check": "ok", "prompts": len(train),
              "eval": len(ev), "prompt_eval_overlap": overlap,
              "steps_cover_prompts": a.steps * a.prompts_per_step / len(train), "model": facts,
              "completions_per_step": a.group_size * a.prompts_per_step,
              "completions_per_update": a.group_size * a.prompts_per_step // a.mini_batches,
              "first_prompt": train[0][0], "samples": samples}
    print(json.dumps(report, indent=1))
    if overlap:
        print(f"warning: {overlap} prompts of {a.prompts} are also in {a.eval}", file=sys.stderr)
    return 0


# ---- shared GPU pieces (torch imported here only) ----

class Stop:
    """Why training should stop early, or None: SIGTERM arrived (`timeout` sends it, then SIGKILL a few seconds
    later: the run stops at the next update and still evaluates and writes its summary) or the time budget ran
    out (counted from start())."""

    def __init__(self, budget_s):
        self.budget_s, self.t0, self.reason = budget_s, None, None
        signal.signal(signal.SIGTERM, self._term)

    def _term(self, signum, frame):
        self.reason = self.reason or "SIGTERM"

    def start(self):
        self.t0 = time.time()

    def __call__(self):
        if not self.reason and self.budget_s and self.t0 and time.time() - self.t0 > self.budget_s:
            self.reason = f"time budget {self.budget_s:g}s"
        return self.reason


class Metrics:
    def __init__(self, out):
        self.f = open(os.path.join(out, "metrics.jsonl"), "w")

    def write(self, row):
        self.f.write(json.dumps(row) + "\n")
        self.f.flush()


def versions():
    """Versions of the modules this run imported (None: not imported); imports nothing, so it is quick after a
    SIGTERM."""
    v = {"python": platform.python_version()}
    for m in ("torch", "transformers", "accelerate", "trl", "datasets"):
        v[m] = getattr(sys.modules.get(m), "__version__", None)
    try:
        import torch
        if torch.cuda.is_available():
            v["device"] = torch.cuda.get_device_name(0)
    except Exception:  # noqa: BLE001
        pass
    return v


def seed_all(seed):
    import numpy as np
    import torch
    random.seed(seed)
    np.random.seed(seed)
    torch.manual_seed(seed)
    torch.cuda.manual_seed_all(seed)


def load_model(model_dir, device):
    import torch
    from transformers import AutoModelForCausalLM
    m = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32)  # fp32 master weights
    return m.to(device)


def load_tokenizer(model_dir, first_prompt):
    """The export's tokenizer; when its __call__ would add special tokens (a BOS) to a raw prompt, a subclass whose
    __call__ defaults to add_special_tokens=False, so TRL tokenises prompts as cpt does. Returns (tok, note)."""
    from transformers import AutoTokenizer
    tok = AutoTokenizer.from_pretrained(model_dir)
    note = None
    if tok(first_prompt)["input_ids"] != tok(first_prompt, add_special_tokens=False)["input_ids"]:
        base = type(tok)

        class NoSpecialTokens(base):
            def __call__(self, *args, **kw):
                kw.setdefault("add_special_tokens", False)
                return super().__call__(*args, **kw)

        NoSpecialTokens.__name__ = base.__name__
        tok.__class__ = NoSpecialTokens
        note = "the tokenizer adds special tokens to raw text; __call__ defaults to add_special_tokens=False"
    if tok.pad_token_id is None:
        tok.pad_token = tok.eos_token
    return tok, note


def eos_ids(model, tok):
    """cpt's stop ids: the model's eos_token_id(s) and the tokenizer's."""
    ids = []
    e = model.config.eos_token_id
    for x in (e if isinstance(e, list) else [e]) + [tok.eos_token_id]:
        if x is not None and 0 <= x < model.config.vocab_size and x not in ids:
            ids.append(x)
    if not ids:
        raise SystemExit("the model and its tokenizer name no EOS token")
    return ids


def neutral_generation_config(model, tok, stop_ids):
    """cpt's rollout reads no generation_config.json (one copied into the export, e.g. a base model's top_k or
    repetition penalty, must not steer sampling here): the model's defaults become the plain ones."""
    from transformers import GenerationConfig
    model.generation_config = GenerationConfig(eos_token_id=stop_ids, pad_token_id=tok.pad_token_id)


def encode_prompts(tok, prompts):
    return [tok(p, add_special_tokens=False)["input_ids"] for p in prompts]


def left_pad(seqs, pad_id, device):
    import torch
    n = max(len(s) for s in seqs)
    ids = torch.full((len(seqs), n), pad_id, dtype=torch.long)
    mask = torch.zeros((len(seqs), n), dtype=torch.long)
    for i, s in enumerate(seqs):
        ids[i, n - len(s):] = torch.tensor(s, dtype=torch.long)
        mask[i, n - len(s):] = 1
    return ids.to(device), mask.to(device)


def generate(model, tok, prompt_ids, stop_ids, max_new, temperature, n_samples=1):
    """Completions (token lists, cut after the first stop id, which stays) of each prompt, n_samples each in a row,
    under bf16 autocast. temperature 0: greedy."""
    import torch
    from transformers import GenerationConfig
    seqs = [p for p in prompt_ids for _ in range(n_samples)]
    ids, mask = left_pad(seqs, tok.pad_token_id, model.device)
    gc = GenerationConfig(max_new_tokens=max_new, do_sample=temperature > 0, temperature=temperature or None,
                          top_k=0 if temperature > 0 else None, top_p=1.0 if temperature > 0 else None,
                          eos_token_id=stop_ids, pad_token_id=tok.pad_token_id, bos_token_id=None)
    was_training = model.training
    model.eval()
    with torch.no_grad(), torch.autocast("cuda", dtype=torch.bfloat16, enabled=model.device.type == "cuda"):
        out = model.generate(input_ids=ids, attention_mask=mask, generation_config=gc)
    model.train(was_training)
    comps = []
    for row in out[:, ids.shape[1]:].tolist():
        c = []
        for t in row:
            c.append(t)
            if t in stop_ids:
                break
        comps.append(c)
    return comps


def evaluate(model, tok, recs, stop_ids, max_new, batch):
    """Greedy accuracy (share of records whose completion scores 1), as cpt's validation."""
    ok = 0
    for i in range(0, len(recs), batch):
        chunk = recs[i:i + batch]
        comps = generate(model, tok, encode_prompts(tok, [p for p, _ in chunk]), stop_ids, max_new, 0.0)
        texts = tok.batch_decode(comps, skip_special_tokens=True)
        ok += sum(score(t, g) for t, (_, g) in zip(texts, chunk))
    return ok / len(recs)


# ---- TRL ----

def run_trl(a, model, tok, train, stop_ids, metrics, out, stop):
    import torch
    from datasets import Dataset
    from transformers import TrainerCallback
    from trl import GRPOConfig, GRPOTrainer

    class StopEarly(TrainerCallback):
        def on_step_end(self, args, state, control, **kw):
            if stop():
                control.should_training_stop = True

    per_update = a.group_size * a.prompts_per_step // a.mini_batches
    step = {"k": 0}

    def math_reward(prompts, completions, answer, **kw):
        # TRL calls it once per generation batch: one cpt step
        r = [score(c, g) for c, g in zip(completions, answer)]
        step["k"] += 1
        metrics.write({"step": step["k"], "reward/mean": sum(r) / len(r), "time": time.time()})
        return r

    # TRL stops at, and masks after, the tokenizer's EOS only; passing the model's too would let padding after it
    # into the loss, so a second stop id is left out and recorded as a difference
    gen_kwargs = None
    cfg = GRPOConfig(
        output_dir=os.path.join(out, "trl"), report_to="none", save_strategy="no", logging_steps=1, disable_tqdm=True,
        seed=a.seed, data_seed=a.seed, bf16=True, gradient_checkpointing=False,
        learning_rate=a.lr, lr_scheduler_type="constant", warmup_steps=0, weight_decay=0.0, max_grad_norm=GRAD_CLIP,
        adam_beta1=ADAM["betas"][0], adam_beta2=ADAM["betas"][1], adam_epsilon=ADAM["eps"], optim="adamw_torch",
        per_device_train_batch_size=per_update, gradient_accumulation_steps=1, steps_per_generation=a.mini_batches,
        num_iterations=1, max_steps=a.steps * a.mini_batches, num_generations=a.group_size,
        max_completion_length=a.max_new_tokens, temperature=a.temperature, top_k=0, top_p=1.0,
        beta=0.0, epsilon=a.clip_low, epsilon_high=a.clip_high, loss_type="bnpo", scale_rewards="group",
        mask_truncated_completions=False, disable_dropout=True, shuffle_dataset=True, log_completions=False,
        generation_kwargs=gen_kwargs, dataloader_num_workers=0, remove_unused_columns=False)
    ds = Dataset.from_list([{"prompt": p, "answer": g} for p, g in train])
    trainer = GRPOTrainer(model=model, reward_funcs=[math_reward], args=cfg, train_dataset=ds, processing_class=tok,
                          callbacks=[StopEarly()])
    t0 = time.time()
    stop.start()
    trainer.train()
    train_s = time.time() - t0
    with open(os.path.join(out, "trl_log.jsonl"), "w") as f:
        for row in trainer.state.log_history:
            f.write(json.dumps(row, default=str) + "\n")
    if step["k"] != a.steps and not stop():
        raise RuntimeError(f"TRL scored {step['k']} generation batches, {a.steps} steps were asked")
    trained = trainer.accelerator.unwrap_model(trainer.model)
    torch.cuda.synchronize()
    return trained, train_s, step["k"], {"loss_type": "bnpo", "per_device_train_batch_size": per_update,
                              "steps_per_generation": a.mini_batches, "max_steps": a.steps * a.mini_batches,
                              "generation_kwargs": gen_kwargs}


# ---- plain PyTorch GRPO ----

def token_logprobs(model, ids, attn, n_prompt_cols):
    """Logprobs of ids[:, t] under the model for the completion columns t >= n_prompt_cols (bf16 autocast, the
    log-softmax in fp32). Positions count real tokens only (left padding), as during generation."""
    import torch
    pos = (attn.cumsum(-1) - 1).clamp(min=0)
    keep = ids.shape[1] - n_prompt_cols + 1  # logits of the last prompt position and every completion position
    with torch.autocast("cuda", dtype=torch.bfloat16, enabled=ids.device.type == "cuda"):
        logits = model(input_ids=ids, attention_mask=attn, position_ids=pos, logits_to_keep=keep).logits
    logits = logits[:, :-1].float()
    tgt = ids[:, n_prompt_cols:]
    return logits.gather(-1, tgt.unsqueeze(-1)).squeeze(-1) - torch.logsumexp(logits, -1)


def run_torch(a, model, tok, train, stop_ids, metrics, stop):
    import torch
    dev = model.device
    G, P, M = a.group_size, a.prompts_per_step, a.mini_batches
    opt = torch.optim.AdamW(model.parameters(), lr=a.lr, **ADAM)
    rng = random.Random(a.seed)
    order, cursor = [], 0
    model.eval()  # no dropout (cpt's models have none); gradients flow all the same
    t0 = time.time()
    stop.start()
    done = 0
    for k in range(1, a.steps + 1):
        if stop():
            break
        batch = []
        while len(batch) < P:  # a new shuffled pass over the prompts when one runs out
            if cursor == len(order):
                order, cursor = list(range(len(train))), 0
                rng.shuffle(order)
            batch.append(train[order[cursor]])
            cursor += 1
        prompt_ids = encode_prompts(tok, [p for p, _ in batch])
        comps = generate(model, tok, prompt_ids, stop_ids, a.max_new_tokens, a.temperature, G)
        texts = tok.batch_decode(comps, skip_special_tokens=True)
        rewards = torch.tensor([score(t, batch[i // G][1]) for i, t in enumerate(texts)], dtype=torch.float64)
        metrics.write({"step": k, "reward/mean": rewards.mean().item(), "time": time.time()})
        grp = rewards.view(P, G)
        adv = (grp - grp.mean(1, keepdim=True)) / (grp.std(1, unbiased=True, keepdim=True) + ADV_EPS)
        adv = adv.view(-1).float().to(dev)
        # sequences: left-padded prompt, completion, right padding; mask over completion tokens
        seqs = [prompt_ids[i // G] for i in range(P * G)]
        pids, pmask = left_pad(seqs, tok.pad_token_id, dev)
        L = max(len(c) for c in comps)
        cids = torch.full((P * G, L), tok.pad_token_id, dtype=torch.long)
        cmask = torch.zeros((P * G, L), dtype=torch.float32)
        for i, c in enumerate(comps):
            cids[i, :len(c)] = torch.tensor(c, dtype=torch.long)
            cmask[i, :len(c)] = 1
        cids, cmask = cids.to(dev), cmask.to(dev)
        ids = torch.cat([pids, cids], 1)
        attn = torch.cat([pmask, cmask.long()], 1)
        n_prompt_cols = pids.shape[1]
        per = P * G // M
        # default chunk: the fp32 logits of one forward stay near 16 GB
        keep = ids.shape[1] - n_prompt_cols + 1
        chunk = a.micro_batch or max(1, min(per, int(4e9 // (keep * model.config.vocab_size))))
        old = None
        if M > 1:  # the proximal policy: the weights before this step's first update
            with torch.no_grad():
                old = torch.cat([token_logprobs(model, ids[i:i + chunk], attn[i:i + chunk], n_prompt_cols)
                                 for i in range(0, P * G, chunk)])
        for u in range(M):
            lo, hi = u * per, (u + 1) * per  # whole groups, in order (cpt's mini-batches)
            n_tok = cmask[lo:hi].sum().clamp(min=1.0)
            opt.zero_grad(set_to_none=True)
            for i in range(lo, hi, chunk):
                j = min(i + chunk, hi)
                lp = token_logprobs(model, ids[i:j], attn[i:j], n_prompt_cols)
                ratio = torch.exp(lp - (old[i:j] if old is not None else lp.detach()))
                A = adv[i:j].unsqueeze(1)
                obj = torch.min(ratio * A, ratio.clamp(1 - a.clip_low, 1 + a.clip_high) * A)
                loss = -(obj * cmask[i:j]).sum() / n_tok
                loss.backward()
            torch.nn.utils.clip_grad_norm_(model.parameters(), GRAD_CLIP)
            opt.step()
        done = k
    torch.cuda.synchronize()
    return model, time.time() - t0, done, {"adv_eps": ADV_EPS, "mini_batches": "whole groups in order",
                                     "micro_batch": a.micro_batch or "auto"}


# ---- main ----

def main(argv=None):
    a = parse_args(sys.argv[1:] if argv is None else argv)
    if a.check:
        return run_check(a)
    wall0 = time.time()
    os.makedirs(a.out, exist_ok=True)
    train, ev = load_records(a.prompts), load_records(a.eval)
    for msg in (check_records(a.prompts, train), check_records(a.eval, ev)):
        if msg:
            print(f"warning: {msg}", file=sys.stderr)
    # everything is local: no hub look-ups (the GPU machine reaches nothing outside)
    for k in ("HF_HUB_OFFLINE", "HF_DATASETS_OFFLINE", "TRANSFORMERS_OFFLINE"):
        os.environ.setdefault(k, "1")
    import torch
    if not torch.cuda.is_available():
        raise SystemExit("no CUDA device: this run is for the GPU (use --check here)")
    summary = {"impl": None, "args": vars(a), "trl_not_used": None, "differences_from_cpt": None}
    stop = Stop(a.time_budget)
    seed_all(a.seed)
    model = load_model(a.model, "cuda")
    tok, tok_note = load_tokenizer(a.model, train[0][0])
    stop_ids = eos_ids(model, tok)
    neutral_generation_config(model, tok, stop_ids)
    # the prompt ids must be cpt's: compared on every prompt when a cpt binary is at hand
    hf_ids = encode_prompts(tok, [p for p, _ in train + ev])
    cpt = find_cpt(a)
    summary["prompt_ids_head"] = hf_ids[:2]
    summary["prompt_ids_match_cpt"] = None if not cpt else f"{cpt}: all {len(hf_ids)} prompts"
    if cpt:
        theirs = cpt_prompt_ids(cpt, a.model, [p for p, _ in train + ev])
        diff = [i for i, (x, y) in enumerate(zip(hf_ids, theirs)) if x != y]
        if diff:
            i = diff[0]
            raise SystemExit(f"{len(diff)} prompts tokenize differently in transformers and cpt; first "
                             f"{(train + ev)[i][0]!r}: {hf_ids[i]} vs {theirs[i]}")
    summary.update(tokenizer_note=tok_note, stop_ids=stop_ids, params=sum(p.numel() for p in model.parameters()))
    metrics = Metrics(a.out)
    t = time.time()
    acc0 = evaluate(model, tok, ev, stop_ids, a.max_new_tokens, a.eval_batch)
    eval_s = time.time() - t
    metrics.write({"step": 0, "val/accuracy": acc0})
    print(f"trl_grpo: val/accuracy {acc0:.4f} before training ({len(ev)} records, {eval_s:.1f}s)", flush=True)

    trained = None
    if a.impl in ("trl", "auto"):
        try:
            import trl  # noqa: F401
            import datasets  # noqa: F401
        except Exception as e:  # noqa: BLE001 - any import failure is the reason recorded
            if a.impl == "trl":
                raise
            summary["trl_not_used"] = f"import failed: {type(e).__name__}: {e}"
        else:
            try:
                trained, train_s, steps_done, detail = run_trl(a, model, tok, train, stop_ids, metrics, a.out, stop)
                summary["impl"] = "trl"
                summary["differences_from_cpt"] = [
                    "advantage epsilon 1e-4 (cpt 1e-6)",
                    f"logits divided by the temperature ({a.temperature}) in the loss's logprobs (cpt: not)",
                    "mini-batches of shuffled completions (cpt: whole groups in order unless train.mini_batch_shuffle)",
                    "no truncated importance weight (cpt's algo.tis: proximal/behaviour, near 1 in sync mode)"]
                if stop_ids != [tok.eos_token_id]:
                    summary["differences_from_cpt"].append(
                        f"stops at the tokenizer's EOS {tok.eos_token_id} only (cpt: {stop_ids})")
            except Exception as e:  # noqa: BLE001
                if a.impl == "trl":
                    raise
                summary["trl_not_used"] = f"run failed: {type(e).__name__}: {e}"
                summary["trl_traceback"] = traceback.format_exc()[-4000:]
                metrics.f.close()
                os.replace(os.path.join(a.out, "metrics.jsonl"), os.path.join(a.out, "metrics.trl-failed.jsonl"))
                metrics = Metrics(a.out)
                metrics.write({"step": 0, "val/accuracy": acc0})
                del model
                torch.cuda.empty_cache()
                seed_all(a.seed)
                model = load_model(a.model, "cuda")
                neutral_generation_config(model, tok, stop_ids)
        if summary["trl_not_used"]:
            print(f"trl_grpo: TRL not used: {summary['trl_not_used']}", file=sys.stderr, flush=True)
    if trained is None:
        trained, train_s, steps_done, detail = run_torch(a, model, tok, train, stop_ids, metrics, stop)
        summary["impl"] = "torch"
        summary["trl_not_used"] = summary["trl_not_used"] or "not asked (--impl torch)"
        summary["differences_from_cpt"] = [
            "no truncated importance weight (cpt's algo.tis: proximal/behaviour, near 1 in sync mode)",
            "prompt order: a seeded shuffle per pass over the prompts (cpt: its data cursor)"]
    t = time.time()
    acc1 = evaluate(trained, tok, ev, stop_ids, a.max_new_tokens, a.eval_batch)
    eval_s += time.time() - t
    metrics.write({"step": steps_done, "val/accuracy": acc1})
    metrics.f.close()
    summary.update(steps_done=steps_done, stopped_early=stop(), detail=detail, versions=versions(),
                   wall_s=time.time() - wall0, train_s=train_s, eval_s=eval_s,
                   val_accuracy_start=acc0, val_accuracy_end=acc1)
    with open(os.path.join(a.out, "summary.json"), "w") as f:
        json.dump(summary, f, indent=1)
    print(f"trl_grpo: impl {summary['impl']}: val/accuracy {acc0:.4f} -> {acc1:.4f}, train {train_s:.1f}s, "
          f"wall {summary['wall_s']:.1f}s", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
