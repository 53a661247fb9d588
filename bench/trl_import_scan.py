#!/usr/bin/env python3
"""Static scan of the carried TRL/datasets sources (bench/trl_carry.sh): starting at `trl`, its GRPO trainer and
`datasets`, follows the imports made unconditionally at module level (not inside try, if, or a function) through
the carry and checks every third-party module they reach against the GPU image's packages. Prints each missing
module with the files that import it; exits 1 if any is missing.
  python3 bench/trl_import_scan.py [.carry-trl]
"""
import ast
import os
import sys

# The device image (docs: Python 3.12, torch, transformers, accelerate, peft, pandas, pyarrow, xxhash, fsspec,
# huggingface_hub, requests, tqdm, pyyaml) and what those pull in as their own requirements.
DEVICE = {
    "torch", "transformers", "accelerate", "peft", "pandas", "pyarrow", "xxhash", "fsspec", "huggingface_hub",
    "requests", "tqdm", "yaml", "numpy", "tokenizers", "safetensors", "regex", "packaging", "filelock", "httpx",
    "jinja2", "sympy", "networkx", "typing_extensions", "psutil", "dateutil", "pytz", "urllib3", "certifi",
    "idna", "charset_normalizer", "markupsafe", "hf_xet", "anyio", "h11", "httpcore", "sniffio", "mpmath",
    "triton", "typer", "click", "shellingham", "rich",
}
CARRIED = {"trl", "datasets", "dill", "multiprocess", "_multiprocess"}
# the modules `from trl import GRPOTrainer` loads (trl's lazy module loads the trainer on first access); the scan
# follows their unconditional imports inside the carry
ENTRY = ["trl", "trl.trainer.grpo_trainer", "trl.trainer.grpo_config", "datasets"]


def stdlib():
    return set(sys.stdlib_module_names) | {"__future__", "__main__"}


def unconditional_imports(tree, modname, is_pkg):
    """Full module names imported by statements directly in the module body (relative ones resolved; for
    `from M import x` both M and M.x, since x may be a submodule)."""
    for node in tree.body:
        if isinstance(node, ast.Import):
            for a in node.names:
                yield a.name
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                parts = modname.split(".")
                base = parts if is_pkg else parts[:-1]
                base = base[: len(base) - (node.level - 1)]
                mod = ".".join(base + ([node.module] if node.module else []))
            else:
                mod = node.module
            yield mod
            for a in node.names:
                yield f"{mod}.{a.name}"


def module_file(root, mod):
    """(path, is_package) of a carried module, or None."""
    base = os.path.join(root, *mod.split("."))
    if os.path.isfile(os.path.join(base, "__init__.py")):
        return os.path.join(base, "__init__.py"), True
    if os.path.isfile(base + ".py"):
        return base + ".py", False
    return None


def closure(root, known):
    """Missing top-level modules reached from ENTRY through unconditional imports: {module: [importing files]}."""
    seen, pending, missing = set(), list(ENTRY), {}
    while pending:
        mod = pending.pop()
        if mod in seen:
            continue
        seen.add(mod)
        # importing a.b.c runs a/__init__ and a/b/__init__ too
        parts = mod.split(".")
        for k in range(1, len(parts)):
            pending.append(".".join(parts[:k]))
        mf = module_file(root, mod)
        if not mf:
            continue
        tree = ast.parse(open(mf[0], encoding="utf-8").read(), mf[0])
        for m in unconditional_imports(tree, mod, mf[1]):
            top = m.split(".")[0]
            if top in CARRIED:
                pending.append(m)
            elif top not in known:
                missing.setdefault(top, []).append(os.path.relpath(mf[0], root))
    return missing, sum(1 for m in seen if module_file(root, m))


def main():
    root = sys.argv[1] if len(sys.argv) > 1 else ".carry-trl"
    known = stdlib() | DEVICE | CARRIED
    missing, n = closure(root, known)
    for m, files in sorted(missing.items()):
        print(f"MISSING on the GRPOTrainer import path: {m}: {', '.join(sorted(set(files)))}")
    print(f"trl_import_scan: {n} carried modules reached from {', '.join(ENTRY)}; "
          f"{len(missing)} third-party modules not on the device image")
    return 1 if missing else 0


if __name__ == "__main__":
    sys.exit(main())
