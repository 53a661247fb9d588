"""cpt's `reward.type = "math"` (reward/math_answer.c, reward/reward_rules.c) in Python, for the TRL side-by-side
run (bench/trl_grpo.py). It works on bytes with ASCII character classes, as the C code does on its char strings, so
both score every completion alike; tests/e2e/test_trl_reward.sh checks that on tests/fixtures/math_reward/cases.jsonl,
which tests/unit/test_reward_math_cases.c checks against the C functions.

Extraction: the contents of the last well-formed \\boxed{...} / \\fbox{...} (or "\\boxed 5"), else the rest of the
line after the last "####". Equivalence: normalised answers compared as exact rationals when both are numbers, else
as normalised strings. Score: 1 when the extracted answer equals the gold answer, 0 otherwise (no answer: 0).
No torch, no third-party module: importable anywhere."""
import decimal
from fractions import Fraction

_SPACE = b" \t\n\v\f\r"
_I128_MAX = (1 << 127) - 1
_I128_MIN = -(1 << 127)
# the long double shadow of a number (x86 80-bit: about 19 digits, exponent up to about 4932)
_LD = decimal.Context(prec=19, Emax=4931, Emin=-4950, traps=[])
_LD_MAX = decimal.Decimal("1.18973149535723176502e4932")


def _isspace(c):
    return c in _SPACE


def _isdigit(c):
    return 48 <= c <= 57


def _isalpha(c):
    return 65 <= c <= 90 or 97 <= c <= 122


def _trim(s):
    i, j = 0, len(s)
    while i < j and _isspace(s[i]):
        i += 1
    while j > i and _isspace(s[j - 1]):
        j -= 1
    return s[i:j]


def _match_brace(s, i):
    """Index just past the '}' matching the '{' at s[i], or 0 when unbalanced; \\{ and \\} do not count."""
    depth, j, n = 0, i, len(s)
    while j < n:
        c = s[j]
        if c == 0x5C and j + 1 < n and s[j + 1] in b"{}":
            j += 2
            continue
        if c == 0x7B:
            depth += 1
        elif c == 0x7D:
            depth -= 1
            if depth == 0:
                return j + 1
        j += 1
    return 0


def _boxed_arg(t, i, k):
    n, j = len(t), i + k
    if j < n and t[j] == 0x7B:
        e = _match_brace(t, j)
        if not e:
            return None
        s = _trim(t[j + 1:e - 1])
        return s if s else None
    if j < n and t[j] == 0x20:
        while j < n and t[j] == 0x20:
            j += 1
        e = j
        while e < n and not _isspace(t[e]) and t[e] != 0x24:
            e += 1
        return t[j:e] if e > j else None
    return None


def extract_answer(t):
    """The final answer of t (bytes), or None."""
    n = len(t)
    for i in range(n - 1, -1, -1):
        if t[i] != 0x5C:
            continue
        k = 6 if t.startswith(b"\\boxed", i) else 5 if t.startswith(b"\\fbox", i) else 0
        if not k:
            continue
        a = _boxed_arg(t, i, k)
        if a is not None:
            return a
    for i in range(n - 1, 2, -1):
        if t[i - 3:i + 1] != b"####":
            continue
        e = i + 1
        while e < n and t[e] != 0x0A:
            e += 1
        s = _trim(t[i + 1:e])
        return s if s else None
    return None


_WRAPPERS = (b"\\text", b"\\textbf", b"\\mathrm", b"\\mbox", b"\\boxed", b"\\mathbf", b"\\textrm")
_TOKEN_MAP = (
    (b"\\left", b""), (b"\\right", b""), (b"\\displaystyle", b""), (b"\\!", b""), (b"\\,", b""), (b"\\;", b""),
    (b"\\:", b""), (b"\\ ", b" "), (b"~", b" "), (b"\\dfrac", b"\\frac"), (b"\\tfrac", b"\\frac"),
    (b"^{\\circ}", b""), (b"^\\circ", b""), (b"\\circ", b""), (b"\\%", b""), (b"%", b""), (b"\\$", b""), (b"$", b""),
    (b"{,}", b","), (b"\xe2\x88\x92", b"-"), (b"\\cdot", b"*"), (b"\\times", b"*"),
)


def _whole_wrapper(s):
    n = len(s)
    for w in _WRAPPERS:
        m = len(w)
        if s.startswith(w) and m < n and s[m] == 0x7B and _match_brace(s, m) == n:
            return s[m + 1:n - 1]
    return None


def _peel(s):
    while True:
        s = _trim(s)
        n = len(s)
        if n >= 2 and s[0] == 0x24 and s[-1] == 0x24:
            s = s[1:-1]
            continue
        if n >= 4 and (s.startswith(b"\\(") or s.startswith(b"\\[")) and s[-2] == 0x5C and s[-1] in b")]":
            s = s[2:-2]
            continue
        w = _whole_wrapper(s)
        if w is not None:
            s = w
            continue
        if n >= 1 and s[-1] == 0x2E:
            s = s[:-1]
            continue
        return s


def _replace_tokens(s):
    out, i, n = bytearray(), 0, len(s)
    while i < n:
        for a, b in _TOKEN_MAP:
            m = len(a)
            if s.startswith(a, i):
                # a command name must not continue with letters: "\right" is not "\rightarrow"
                if a[0] == 0x5C and _isalpha(a[m - 1]) and i + m < n and _isalpha(s[i + m]):
                    continue
                out += b
                i += m
                break
        else:
            out.append(s[i])
            i += 1
    return bytes(out)


def _cstr(s):
    """What C sees of a byte string: up to the first NUL."""
    k = s.find(b"\0")
    return s if k < 0 else s[:k]


def _normalize_keep_spaces(a):
    r = _replace_tokens(_peel(_cstr(a)))
    k = r.rfind(b"=")
    if k >= 0 and k + 1 < len(r):
        r = r[k + 1:]
    return _peel(r)


def normalize(a):
    """The normalised form used for the string comparison."""
    return bytes(c for c in _normalize_keep_spaces(a) if not _isspace(c))


class _Num:
    __slots__ = ("exact", "n", "d", "v")

    def __init__(self):
        self.exact, self.n, self.d, self.v = True, 0, 1, decimal.Decimal(0)


def _fits(x):
    return _I128_MIN <= x <= _I128_MAX


def _parse_decimal(s, x):
    n, i, digits, group = len(s), 0, 0, -1
    x.exact, x.n, x.d, x.v = True, 0, 1, decimal.Decimal(0)
    while i < n and (_isdigit(s[i]) or (s[i] == 0x2C and digits > 0)):
        if s[i] == 0x2C:
            if (group == -1 and digits > 3) or (group != -1 and group != 3):
                return 0
            group = 0
            i += 1
            continue
        dg = s[i] - 48
        if x.exact:
            nn = x.n * 10 + dg
            if _fits(x.n * 10) and _fits(nn):
                x.n = nn
            else:
                x.exact = False
        x.v = _LD.add(_LD.multiply(x.v, 10), dg)
        digits += 1
        if group >= 0:
            group += 1
        i += 1
    if group != -1 and group != 3:
        return 0
    if i < n and s[i] == 0x2E and i + 1 < n and _isdigit(s[i + 1]):
        i += 1
        scale = decimal.Decimal(1)
        while i < n and _isdigit(s[i]):
            dg = s[i] - 48
            if x.exact:
                nn, dd = x.n * 10 + dg, x.d * 10
                if _fits(x.n * 10) and _fits(nn) and _fits(dd):
                    x.n, x.d = nn, dd
                else:
                    x.exact = False
            scale = _LD.divide(scale, 10)
            x.v = _LD.add(x.v, _LD.multiply(dg, scale))
            digits += 1
            i += 1
    elif i < n and s[i] == 0x2E and digits > 0 and (i + 1 == n or not _isdigit(s[i + 1])):
        i += 1  # "5."
    if not digits:
        return 0
    if i < n and s[i] in b"eE":
        j, neg = i + 1, False
        if j < n and s[j] in b"+-":
            neg = s[j] == 0x2D
            j += 1
        e = ed = 0
        while j < n and _isdigit(s[j]) and ed < 5:
            e, j, ed = e * 10 + (s[j] - 48), j + 1, ed + 1
        if 0 < ed <= 4 and not (j < n and _isdigit(s[j])):
            # a negative exponent scales the exact denominator, a positive one the numerator
            part, step = ("d", _LD.divide) if neg else ("n", _LD.multiply)
            for _ in range(e):
                if x.exact:
                    if _fits(getattr(x, part) * 10):
                        setattr(x, part, getattr(x, part) * 10)
                    else:
                        x.exact = False
                x.v = step(x.v, 10)
                if x.v == 0 or x.v.is_infinite() or abs(x.v) > _LD_MAX:
                    break
            i = j
    return i


def _num_div(a, b):
    if b.v == 0 or (b.exact and b.n == 0):
        return -1
    a.v = _LD.divide(a.v, b.v)
    if a.exact and b.exact:
        n, d = a.n * b.d, a.d * b.n
        if _fits(n) and _fits(d):
            if d < 0:
                if n == _I128_MIN or d == _I128_MIN:
                    a.exact = False
                    return 0
                n, d = -n, -d
            a.n, a.d = n, d
            return 0
    a.exact = False
    return 0


def _num_add(a, b):
    a.v = _LD.add(a.v, b.v)
    if a.exact and b.exact:
        x, y, d = a.n * b.d, b.n * a.d, a.d * b.d
        if _fits(x) and _fits(y) and _fits(x + y) and _fits(d):
            a.n, a.d = x + y, d
            return
    a.exact = False


def _num_neg(a):
    a.v = -a.v
    if a.exact:
        if a.n == _I128_MIN:
            a.exact = False
        else:
            a.n = -a.n


def _parse_sign(s):
    if s and s[0] in b"+-":
        return 1, s[0] == 0x2D
    return 0, False


def _parse_frac_arg(s, x):
    n = len(s)
    if n and _isdigit(s[0]):
        x.exact, x.n, x.d = True, s[0] - 48, 1
        x.v = decimal.Decimal(x.n)
        return 1
    if not n or s[0] != 0x7B:
        return 0
    i = 1
    while i < n and s[i] == 0x20:
        i += 1
    k, neg = _parse_sign(s[i:])
    i += k
    k = _parse_decimal(s[i:], x)
    if not k:
        return 0
    i += k
    while i < n and s[i] == 0x20:
        i += 1
    if i >= n or s[i] != 0x7D:
        return 0
    if neg:
        _num_neg(x)
    return i + 1


def _parse_frac(s, x):
    if not s.startswith(b"\\frac"):
        return 0
    n, i = len(s), 5
    while i < n and s[i] == 0x20:
        i += 1
    b = _Num()
    k = _parse_frac_arg(s[i:], x)
    if not k:
        return 0
    i += k
    while i < n and s[i] == 0x20:
        i += 1
    k = _parse_frac_arg(s[i:], b)
    if not k or _num_div(x, b):
        return 0
    return i + k


def _parse_number(s, x):
    s = _trim(s)
    n = len(s)
    i, neg = _parse_sign(s)
    k = _parse_frac(s[i:], x)
    if k:
        i += k
    else:
        k = _parse_decimal(s[i:], x)
        if not k:
            return False
        i += k
        b = _Num()
        k2 = _parse_decimal(s[i + 1:], b) if i < n and s[i] == 0x2F else 0
        if k2:
            if _num_div(x, b):
                return False
            i += 1 + k2
        else:
            # mixed number "2\frac{1}{2}" (or "2 \frac12"): a whole number and a proper positive fraction
            sp = 1 if i < n and s[i] == 0x20 else 0
            k2 = _parse_frac(s[i + sp:], b)
            if k2:
                if not (x.exact and x.d == 1 and b.exact and 0 <= b.n < b.d):
                    return False
                _num_add(x, b)
                i += sp + k2
    # what follows may only be unit words: a space, then letters and spaces
    if i < n:
        if not _isspace(s[i]):
            return False
        if any(not _isalpha(c) and not _isspace(c) for c in s[i:]):
            return False
    if neg:
        _num_neg(x)
    return x.v.is_finite() and abs(x.v) <= _LD_MAX


def _drop_text_groups(s):
    out, i, n = bytearray(), 0, len(s)
    while i < n:
        m = 0
        if s.startswith(b"\\text{", i) or s.startswith(b"\\mbox{", i):
            m = 5
        elif s.startswith(b"\\mathrm{", i):
            m = 7
        e = _match_brace(s, i + m) if m else 0
        if e:
            out += b" " + s[i + m + 1:e - 1]
            i = e
        else:
            out.append(s[i])
            i += 1
    return bytes(out)


def _as_number(s, x):
    return _parse_number(s, x) or _parse_number(_drop_text_groups(s), x)


def _nums_equal(a, b):
    if a.exact and b.exact:
        return Fraction(a.n, a.d) == Fraction(b.n, b.d)
    m = max(abs(a.v), abs(b.v))
    return abs(_LD.subtract(a.v, b.v)) <= _LD.multiply(decimal.Decimal("1e-12"), m)


def answers_equal(a, b):
    """True if the two answers (bytes, already extracted) are equivalent."""
    if a is None or b is None:
        return False
    na, nb = _normalize_keep_spaces(a), _normalize_keep_spaces(b)
    x, y = _Num(), _Num()
    xa, yb = _as_number(na, x), _as_number(nb, y)
    if xa and yb:
        return _nums_equal(x, y)
    if not xa and not yb:
        return normalize(a) == normalize(b)
    return False


def gold_answer(gold):
    """A gold answer may be bare ("72") or carry its own marker ("... #### 72", "\\boxed{72}")."""
    gold = _cstr(gold)
    a = extract_answer(gold)
    return a if a is not None else gold


def gold_text(answer):
    """The gold answer of an RL.jsonl record as cpt reads it (core/dataset.c): a string as is, a number as its
    JSON text. Raises ValueError for anything else or an empty answer (cpt refuses those too)."""
    if isinstance(answer, bool) or not isinstance(answer, (str, int, float)):
        raise ValueError(f"field 'answer': expected a string or a number, got {type(answer).__name__}")
    if isinstance(answer, str):
        text = answer
    elif isinstance(answer, int):
        text = str(answer)
    else:
        # jansson's real format: 17 significant digits, ".0" when that reads as an integer
        text = "%.17g" % answer
        if not any(c in text for c in ".eEn"):
            text += ".0"
    if not text:
        raise ValueError("field 'answer': empty")
    return text


def grade(completion, gold):
    """(score, found): score 1 if the completion's answer equals the gold answer, else 0; found tells whether the
    completion had an extractable answer. Both arguments str (UTF-8) or bytes."""
    if isinstance(completion, str):
        completion = completion.encode("utf-8", "surrogatepass")
    if isinstance(gold, str):
        gold = gold.encode("utf-8", "surrogatepass")
    ans = extract_answer(_cstr(completion))
    if ans is None:
        return 0, 0
    return (1 if answers_equal(ans, gold_answer(gold)) else 0), 1
