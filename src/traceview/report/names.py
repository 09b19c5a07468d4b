"""Kernel names short enough for a table cell that keep what tells two kernels apart.

A kernel's full name is a C++ signature (`void ns::kernel<args>(params)`), an Itanium-mangled symbol
(`_ZN5aiter24add_rmsnorm_quant_kernelI...`) or a generated identifier whose underscore-separated tokens are
its configuration: cuBLAS/cuDNN `sm90_xmma_gemm_bf16bf16_bf16f32_f32_tn_n_tilesize64x128x64_..._cublas`,
CUTLASS `cutlass_80_tensorop_s16816gemm_bf16_128x64_64x6_tn_align8` (arch, op, dtype, threadblock tile,
K tile x stages, layout, alignment), nvjet `nvjet_hsh_256x128_64x4_1x2_h_bz_coopA_NTT`, Tensile
`Cijk_Alik_Bljk_..._MT256x16x64_MI16x16x1_..._ISA942_...`, MIOpen `igemm_fwd_gtcx2_..._bt64x64x64_...`,
Triton `triton_poi_fused_add_0`.

The short form is the kernel's own identifier (namespaces, return type, parameters and template arguments
gone; a generic wrapper such as `cutlass::Kernel2<X>` or `cutlass::device_kernel<X>` is named by X), then
the tiles and floating-point dtypes its template arguments spell (`‹128x128x128 bf16›`). An identifier wider
than the cell loses tokens by what they carry: the family prefix, the first tile and the last token (the
variant) stay longest, then the tokens before the tile (dtype, layout, arch), and the tokens after the tile go
first, from the right. `short_kernel_names` shortens one table's names together: where two read the same, the
tokens or template arguments that differ come back, so two different kernels never share a text.
"""

from __future__ import annotations

import re
from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass, field

WIDTH = 72  # characters of a kernel-name cell
ELLIPSIS = "…"
_OPEN = {"<": ">", "(": ")", "[": "]", "{": "}"}
_ANONYMOUS = re.compile(r"\(anonymous namespace\)(::)?|<unnamed>(::)?")
_CAST = re.compile(r"^\((?:unsigned |signed )?[A-Za-z_][\w ]*\)\s*")  # `(int)4`, `(unsigned long)3`
_INTEGER = re.compile(r"^_?(-?\d+)(?:[uUlL]{1,3})?$")  # `4`, `1ul`, `cute::_64`
_TILE = re.compile(r"\d+x\d+")
_GENERIC = re.compile(r"(?:device_?|k)?(?:kernel|entry)\d*", re.I)  # wrappers named after what they run
_BUILTIN = re.compile(r"^(?:(?:un)?signed|int|long|short|char|bool|void|size_t|u?int\d+_t)$")
_DTYPES = (  # floating-point types as C++ spells them, to the short names the report uses
    (re.compile(r"bfloat16|^bf16$", re.I), "bf16"),
    (re.compile(r"e4m3", re.I), "fp8e4m3"),
    (re.compile(r"e5m2", re.I), "fp8e5m2"),
    (re.compile(r"tfloat32", re.I), "tf32"),
    (re.compile(r"^(?:__)?half\d*$|float16|^fp16$", re.I), "f16"),
    (re.compile(r"^float(?:32)?(?:_t)?$", re.I), "f32"),
    (re.compile(r"^double$", re.I), "f64"),
)
_MANGLED_DTYPES = {"DF16b": "bf16", "DF16_": "f16", "Dh": "f16"}


@dataclass
class _Node:
    """One C++ name with its template arguments."""

    name: str
    args: list[_Node] = field(default_factory=list)

    def integer(self) -> str | None:
        """The value of an integral constant: `4`, `1ul`, `cute::_64`, `cute::C<128>`."""
        if not self.args:
            match = _INTEGER.match(self.name)
            return match.group(1) if match else None
        return self.args[0].integer() if len(self.args) == 1 else None


def _scan(text: str, separator: str) -> list[str]:
    """`text` split at `separator` outside every bracket pair."""
    parts, depth, start, i = [], 0, 0, 0
    while i < len(text):
        char = text[i]
        if char in _OPEN:
            depth += 1
        elif char in _OPEN.values():
            depth = max(0, depth - 1)
        elif depth == 0 and text.startswith(separator, i):
            parts.append(text[start:i])
            i += len(separator)
            start = i
            continue
        i += 1
    parts.append(text[start:])
    return parts


def _closing(text: str, start: int) -> int:
    """The index of the bracket that closes the one at `start` (the end of the text if none does)."""
    depth = 0
    for i in range(start, len(text)):
        if text[i] in _OPEN:
            depth += 1
        elif text[i] in _OPEN.values():
            depth -= 1
            if depth == 0:
                return i
    return len(text)


def _opening(text: str, char: str) -> int:
    """The index of the first `char` outside brackets, -1 when there is none."""
    depth = 0
    for i, c in enumerate(text):
        if c == char and depth == 0:
            return i
        if c in _OPEN:
            depth += 1
        elif c in _OPEN.values():
            depth = max(0, depth - 1)
    return -1


def _node(text: str) -> _Node:
    text = _CAST.sub("", text.strip())
    lt = _opening(text, "<")
    name, args = (text, []) if lt < 0 else (text[:lt], [_node(a) for a in _scan(text[lt + 1:_closing(text, lt)], ",")])
    # a lambda inside a function (`log_kernel_cuda(...)::{lambda()#1}::operator()() const`) is named by the function
    components = [c.strip() for c in _scan(name.strip(), "::") if c.strip()]
    named = [c for c in components if c[0] not in "{[" and not c.startswith("operator")]
    leaf = (named or components or [name])[-1]
    paren = _opening(leaf, "(")
    leaf = leaf[:paren] if paren > 0 else leaf
    leaf = re.sub(r"\s*[*&]+|\bconst\b|\s+", "", leaf)  # `char const *` and `char*` are one type
    return _Node(leaf, args)


def _compact(node: _Node) -> str:
    """A template argument without namespaces, casts or integer suffixes: `FillFunctor<Half>`, `array<char,1>`."""
    value = node.integer()
    if value is not None and not node.args:
        return value
    return node.name + (f"<{','.join(_compact(a) for a in node.args)}>" if node.args else "")


def _demangled(name: str) -> tuple[list[_Node], list[str]]:
    """The name's chain from the outer function to the kernel it names, and its parameter types."""
    text = _ANONYMOUS.sub("", name.strip())
    paren = _opening(text, "(")
    head = text if paren < 0 else text[:paren]
    params = [] if paren < 0 else [_compact(_node(p)) for p in _scan(text[paren + 1:_closing(text, paren)], ",")]
    words = [w for w in _scan(head.strip(), " ") if w]
    root = _node(words[-1] if words else head)
    chain = [root]
    if _GENERIC.fullmatch(root.name) and root.args and not _BUILTIN.match(root.args[0].name) \
            and root.args[0].integer() is None and _dtype(root.args[0].name) is None:
        chain.append(root.args[0])
        while len(chain[-1].args) == 1 and chain[-1].args[0].args:
            chain.append(chain[-1].args[0])
    return chain, params


def _mangled(name: str) -> tuple[str, list[str], list[str], list[str]]:
    """An Itanium symbol read for its identifiers and integer arguments: (kernel identifier, tiles, dtypes,
    every identifier and constant after it). A generic wrapper's identifier gives way to the next one."""
    tokens: list[tuple[str, str, int]] = []  # (kind, text, end)
    i = 2
    while i < len(name):
        literal = re.compile(r"L([a-z])(-?\d+)E").match(name, i)  # `Li64E`; `Lb0E` is a bool
        skip = re.compile(r"[ST][0-9A-Z]*_").match(name, i)
        length = re.compile(r"\d+").match(name, i)
        dtype = next((code for code in _MANGLED_DTYPES if name.startswith(code, i)), None)
        if literal:
            tokens.append(("bool" if literal.group(1) == "b" else "int", literal.group(2), literal.end()))
            i = literal.end()
        elif dtype:
            tokens.append(("dtype", _MANGLED_DTYPES[dtype], i + len(dtype)))
            i += len(dtype)
        elif skip:
            i = skip.end()
        elif length:
            end = length.end() + int(length.group())
            tokens.append(("id", name[length.end():end], end))
            i = max(end, i + 1)
        else:
            i += 1
    ids = [(k, t) for k, (kind, t, end) in enumerate(tokens) if kind == "id" and t
           and (end >= len(name) or name[end] in "IE")]
    pick = 0
    while pick + 1 < len(ids) and _GENERIC.fullmatch(ids[pick][1]):
        pick += 1
    if not ids:
        return name, [], [], []
    start, ident = ids[pick]
    rest = tokens[start + 1:]
    tiles, run = [], []
    for position, (kind, text, end) in enumerate(rest):
        if kind == "int":
            run.append(text)
        if kind != "int" or position == len(rest) - 1:
            if _is_tile(run):
                tiles.append("x".join(run))
            run = []
    dtypes = [text for kind, text, _ in rest if kind == "dtype"]
    dtypes += [d for kind, text, _ in rest if kind == "id" for d in [_dtype(text)] if d]
    return ident, tiles, dtypes, [text for _, text, _ in rest]


def _is_tile(values: list) -> bool:
    """Two to four positive extents, not all 1: a tile or cluster shape (`GemmShape<128,128,32>`)."""
    return 2 <= len(values) <= 4 and all(int(v) > 0 for v in values) and set(values) != {"1"}


def _dtype(type_name: str) -> str | None:
    return next((short for pattern, short in _DTYPES if pattern.search(type_name)), None)


def _walk(node: _Node, parent: str | None = None) -> Iterable[tuple[str | None, _Node]]:
    for arg in node.args:
        yield parent if parent is not None else node.name, arg
        yield from _walk(arg, arg.name)


@dataclass
class _Name:
    """A kernel name read once: the identifier to show, the summary of its template arguments, and the
    leaves a table compares when two kernels read the same."""

    full: str
    ident: str = ""
    summary: str = ""
    leaves: list[str] = field(default_factory=list)

    def __post_init__(self) -> None:
        text = " ".join(self.full.split())
        if text.startswith("_Z"):
            self.ident, tiles, dtypes, self.leaves = _mangled(text)
        else:
            chain, params = _demangled(text)
            kernel = chain[-1]
            self.ident = kernel.name or text
            tiles, dtypes = [], []
            for _, node in _walk(chain[0]):
                values = [a.integer() for a in node.args]
                if None not in values and _is_tile(values):
                    tiles.append("x".join(v for v in values if v is not None))
                elif not node.args and (d := _dtype(node.name)):
                    dtypes.append(d)
            self.leaves = [c.name for c in chain[:-1]] + [_compact(a) for a in kernel.args]
            self.leaves += [f"({p})" for p in params]
        parts = list(dict.fromkeys(tiles))[:2] + list(dict.fromkeys(dtypes))[:2]
        self.summary = f"‹{' '.join(parts)}›" if parts else ""

    def render(self, width: int, keep: frozenset[int] = frozenset(), detail: str = "") -> str:
        suffix = " ".join(p for p in (self.summary, detail) if p)
        budget = max(min(len(self.ident), 40), width - len(suffix) - (1 if suffix else 0))
        return " ".join(p for p in (_fit(self.ident, budget, keep), suffix) if p)


def _fit(ident: str, width: int, keep: frozenset[int] = frozenset()) -> str:
    """The identifier in `width` characters: its tokens dropped by rank (see the module's docstring), each run
    of dropped tokens one ellipsis; the tokens at `keep` stay."""
    if len(ident) <= width and not keep:
        return ident
    tokens = ident.split("_")
    tile = next((i for i, t in enumerate(tokens) if _TILE.search(t)), None)

    def rank(i: int) -> int:
        if i in keep:
            return 9
        if i == 0 or i == tile:
            return 8
        if i == len(tokens) - 1:
            return 7
        if tile is not None and i > tile:
            return 2  # after the tile: dropped from the right, so what stays reads as one run
        return 4 + any(c.isdigit() for c in tokens[i])

    shown = set(range(len(tokens)))

    def text() -> str:
        out: list[str] = []
        for i, token in enumerate(tokens):
            if i in shown:
                out.append(token)
            elif not out or out[-1] != ELLIPSIS:
                out.append(ELLIPSIS)
        return "_".join(out)

    for i in sorted(range(len(tokens)), key=lambda i: (rank(i), 0 if rank(i) == 2 else -len(tokens[i]), -i)):
        if len(text()) <= width or rank(i) == 9:
            break
        shown.discard(i)
    result = text()
    return result if len(result) <= width or keep else result[: width - 1] + ELLIPSIS


def short_kernel_name(name: str, width: int = WIDTH) -> str:
    """One kernel's short name (a table of several: `short_kernel_names`)."""
    return _Name(name).render(width) if name else name


def short_kernel_names(names: Iterable[str], width: int = WIDTH) -> dict[str, str]:
    """Each distinct name's short text, no two the same: where names collide, the identifier tokens that
    differ stay, then the template arguments or parameters that differ are added, and as a last resort a
    number in the order of the full names."""
    parsed = {n: _Name(n) for n in dict.fromkeys(names) if n}
    short = {n: p.render(width) for n, p in parsed.items()}
    for stage in (_differing_tokens, _differing_leaves, _numbered):
        groups: dict[str, list[str]] = defaultdict(list)
        for full, text in short.items():
            groups[text].append(full)
        for text, members in groups.items():
            if len(members) > 1:
                short.update(stage(sorted(members), parsed, width, text))
    return short


def _differing_tokens(members: list[str], parsed: dict[str, _Name], width: int, text: str) -> dict[str, str]:
    tokens = [parsed[m].ident.split("_") for m in members]
    common = set.intersection(*(set(t) for t in tokens))
    if all(set(t) == common for t in tokens):
        return {}
    return {m: parsed[m].render(width, frozenset(i for i, t in enumerate(row) if t not in common))
            for m, row in zip(members, tokens)}


def _differing_leaves(members: list[str], parsed: dict[str, _Name], width: int, text: str) -> dict[str, str]:
    leaves = [parsed[m].leaves for m in members]
    differ = [i for i in range(max(map(len, leaves), default=0))
              if len({row[i] if i < len(row) else None for row in leaves}) > 1]
    if not differ:
        return {}
    out = {}
    for member, row in zip(members, leaves):
        shown = list(dict.fromkeys(_difference(row[i], [r[i] for r in leaves if i < len(r)])
                                   for i in differ[:2] if i < len(row)))
        more = f", {ELLIPSIS}" if len(differ) > 2 else ""
        out[member] = parsed[member].render(width, detail=f"‹{', '.join(shown or ['—'])}{more}›")
    return out


def _difference(text: str, others: list[str]) -> str:
    """`text` less the prefix and suffix it shares with every other value of its place, cut at a `<` or
    `,`: `…MulFunctor…` of `gpu_kernel_impl<BinaryFunctor<float,MulFunctor<float>>>`."""
    prefix = len(_common(others))
    suffix = len(_common([o[::-1] for o in others]))
    start = max((text.rfind(c, 0, prefix) + 1 for c in "<,("), default=0) if prefix < len(text) else 0
    end = len(text) - suffix
    stops = [i for i in (text.find(c, end) for c in "<>,)") if i >= 0]
    end = min(stops) if stops and end > start else len(text)
    middle = text[start:end] or text
    return _cut(("…" if start else "") + middle + ("…" if end < len(text) else ""), 40)


def _common(values: list[str]) -> str:
    first, last = min(values), max(values)
    size = next((i for i, (a, b) in enumerate(zip(first, last)) if a != b), min(len(first), len(last)))
    return first[:size]


def _cut(text: str, width: int) -> str:
    return text if len(text) <= width else text[: width - 1] + ELLIPSIS


def _numbered(members: list[str], parsed: dict[str, _Name], width: int, text: str) -> dict[str, str]:
    return {m: f"{text} #{i}" for i, m in enumerate(members, 1)}
