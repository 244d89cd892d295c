"""Experimental designs beyond the full cross product.

- **full**: every combination of the design's factors (the default).
- **ofat**: one factor at a time against a baseline: the baseline run, and
  for each factor each of its other levels with every other factor at its
  baseline level.
- **fractional**: a two-level fractional factorial 2^(k-p) for screening k
  two-level factors in 2^(k-p) runs. The first k-p factors (the base) form a
  full factorial; each of the others is the product of base columns given by
  a generator (``F = ABCD``). The defining relation, the resolution and the
  alias of every main effect and two-factor interaction follow from the
  generators. Without explicit generators, those of the highest resolution
  in the usual tables are used (minimum aberration, after Montgomery,
  Design and Analysis of Experiments, table 8-14), each with the sign that
  puts the all-baseline run (every factor at its first level) in the
  fraction: ``F = -ABCD`` where the word has an even number of letters.
  The default setting is then measured, not extrapolated; a sign changes
  no aliasing, only the sign of the aliased effects.

Columns are coded -1 (a factor's first level) and +1 (its second).
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass
from functools import reduce

LETTERS = "ABCDEFGHJKLMNOPQRSTUVWXYZ"  # I is the identity, as in the literature

#: Generators of the highest resolution for 2^(k-p), by (k, p).
TABLE: dict[tuple[int, int], tuple[str, ...]] = {
    (3, 1): ("C=AB",),
    (4, 1): ("D=ABC",),
    (5, 1): ("E=ABCD",), (5, 2): ("D=AB", "E=AC"),
    (6, 1): ("F=ABCDE",), (6, 2): ("E=ABC", "F=BCD"), (6, 3): ("D=AB", "E=AC", "F=BC"),
    (7, 1): ("G=ABCDEF",), (7, 2): ("F=ABCD", "G=ABDE"), (7, 3): ("E=ABC", "F=BCD", "G=ACD"),
    (7, 4): ("D=AB", "E=AC", "F=BC", "G=ABC"),
    (8, 2): ("G=ABCD", "H=ABEF"), (8, 3): ("F=ABC", "G=ABD", "H=BCDE"), (8, 4): ("E=BCD", "F=ACD", "G=ABC", "H=ABD"),
    (9, 3): ("G=ABCD", "H=ACEF", "J=CDEF"), (9, 4): ("F=BCDE", "G=ACDE", "H=ABDE", "J=ABCE"),
    (9, 5): ("E=ABC", "F=BCD", "G=ACD", "H=ABD", "J=ABCD"),
    (10, 4): ("G=BCDF", "H=ACDF", "J=ABDE", "K=ABCE"), (10, 5): ("F=ABCD", "G=ABCE", "H=ABDE", "J=ACDE", "K=BCDE"),
    (10, 6): ("E=ABC", "F=BCD", "G=ACD", "H=ABD", "J=ABCD", "K=AB"),
    (11, 5): ("G=CDE", "H=ABCD", "J=ABF", "K=BDEF", "L=ADEF"),
    (11, 6): ("F=ABC", "G=BCD", "H=CDE", "J=ACD", "K=ADE", "L=BDE"),
    (11, 7): ("E=ABC", "F=BCD", "G=ACD", "H=ABD", "J=ABCD", "K=AB", "L=AC"),
    # Beyond the printed table: the highest resolution, found by an exhaustive
    # search over generator words (fewest shortest words among the first
    # 20,000 designs of that resolution; not proven minimum aberration).
    (8, 1): ("H=ABCDEFG",), (9, 1): ("J=ABCDEFGH",), (9, 2): ("H=ABCDE", "J=ABCFG"),
    (10, 1): ("K=ABCDEFGHJ",), (10, 2): ("J=ABCDE", "K=ABCFGH"), (10, 3): ("H=ABCD", "J=ABEF", "K=ACEG"),
    (11, 1): ("L=ABCDEFGHJK",), (11, 2): ("K=ABCDEF", "L=ABCGHJ"), (11, 3): ("J=ABCDE", "K=ABCFG", "L=ABDFH"),
    (11, 4): ("H=ABCD", "J=ABEF", "K=ACEG", "L=BDFG"),
}


class DesignError(ValueError):
    """A design that cannot be made as asked."""


def _word(letters: str) -> frozenset[str]:
    return frozenset(letters)


def _times(a: frozenset[str], b: frozenset[str]) -> frozenset[str]:
    """The product of two effects (symmetric difference: A*A = I)."""
    return a ^ b


def _name(w: frozenset[str]) -> str:
    return "".join(sorted(w, key=LETTERS.index)) or "I"


@dataclass(frozen=True)
class Fractional:
    """A 2^(k-p) design: its runs (coded -1/+1 per factor), its generators,
    defining relation, resolution and aliases."""

    k: int
    p: int
    generators: tuple[str, ...]
    runs: tuple[tuple[int, ...], ...]

    @property
    def letters(self) -> str:
        return LETTERS[:self.k]

    def defining_relation(self) -> list[str]:
        """Every word equal to I or -I (the generators' words and all their
        products; signs are not shown)."""
        words = [_word(g.replace("=", "").replace("-", "")) for g in self.generators]
        out = set()
        for r in range(1, len(words) + 1):
            for combo in itertools.combinations(words, r):
                out.add(reduce(_times, combo))
        return sorted((_name(w) for w in out), key=lambda n: (len(n), n))

    @property
    def resolution(self) -> int | None:
        """The length of the shortest word of the defining relation (None: a full factorial)."""
        rel = self.defining_relation()
        return min(len(w) for w in rel) if rel else None

    def aliases(self, order: int = 2) -> dict[str, list[str]]:
        """What each effect of up to ``order`` factors is aliased with (up to
        interactions of ``order`` factors)."""
        rel = [_word(w) for w in self.defining_relation()]
        out: dict[str, list[str]] = {}
        for r in range(1, order + 1):
            for combo in itertools.combinations(self.letters, r):
                e = _word("".join(combo))
                al = sorted({_name(_times(e, w)) for w in rel if len(_times(e, w)) <= order},
                            key=lambda n: (len(n), n))
                out[_name(e)] = al
        return out


def fractional(k: int, p: int, generators: list[str] | None = None) -> Fractional:
    """A 2^(k-p) design from ``generators`` (e.g. ["D=ABC"], or ["E=-ABCD"]
    for the other half), or from the table (signed to contain the
    all-baseline run)."""
    if not 2 <= k <= len(LETTERS):
        raise DesignError(f"a fractional design needs 2 to {len(LETTERS)} two-level factors, got {k}")
    if not 0 <= p < k - 1:
        raise DesignError(f"p must be from 0 to {k - 2} for {k} factors, got {p}")
    base = LETTERS[:k - p]
    if generators is None:
        if p == 0:
            generators = []
        elif (k, p) in TABLE:
            generators = [_with_baseline(g) for g in TABLE[(k, p)]]
        else:
            raise DesignError(f"no tabled 2^({k}-{p}) design: give its generators (e.g. \"{LETTERS[k - 1]}=ABC\")")
    if len(generators) != p:
        raise DesignError(f"a 2^({k}-{p}) design needs {p} generators, got {len(generators)}")
    defined: dict[str, tuple[int, str]] = {}
    for g in generators:
        lhs, sep, rhs = g.replace(" ", "").partition("=")
        sign = -1 if rhs.startswith("-") else 1
        rhs = rhs.lstrip("-")
        if not sep or len(lhs) != 1 or lhs not in LETTERS[k - p:k] or lhs in defined:
            raise DesignError(f"generator {g!r}: the left side must be one of {LETTERS[k - p:k]}, once each")
        if len(rhs) < 2 or any(c not in base for c in rhs) or len(set(rhs)) != len(rhs):
            raise DesignError(f"generator {g!r}: the right side must be two or more of {base}, with a - if negated")
        defined[lhs] = (sign, rhs)
    runs = []
    for levels in itertools.product((-1, 1), repeat=k - p):
        # Standard order: the first factor changes fastest.
        row = dict(zip(base, reversed(levels)))
        for lhs in LETTERS[k - p:k]:
            sign, rhs = defined[lhs]
            row[lhs] = sign * reduce(lambda a, b: a * b, (row[c] for c in rhs), 1)
        runs.append(tuple(row[c] for c in LETTERS[:k]))
    gens = tuple(f"{lhs}={'-' if defined[lhs][0] < 0 else ''}{defined[lhs][1]}" for lhs in LETTERS[k - p:k])
    return Fractional(k, p, gens, tuple(runs))


def _with_baseline(generator: str) -> str:
    """The generator signed so that the run with every base factor at -1 has
    the generated factor at -1 too: negated when its word has an even length."""
    lhs, _, rhs = generator.partition("=")
    return f"{lhs}=-{rhs}" if len(rhs) % 2 == 0 else generator


def for_resolution(k: int, resolution: int) -> Fractional:
    """The smallest tabled design of at least ``resolution`` for k factors."""
    best = fractional(k, 0)
    for p in range(1, k - 1):
        if (k, p) not in TABLE:
            continue
        d = fractional(k, p)
        if (d.resolution or 99) >= resolution:
            best = d
    return best


def ofat(levels: dict[str, list[object]], baseline: dict[str, object]) -> list[dict[str, object]]:
    """One factor at a time: the baseline, then each other level of each factor alone."""
    runs = [dict(baseline)]
    for f, lv in levels.items():
        for v in lv:
            if v != baseline[f]:
                runs.append({**baseline, f: v})
    return runs
