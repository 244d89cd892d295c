"""The tally (``satbench validate --tally QUICK_DB``): one Markdown table per
study, every check's verdict from the full-size presets beside its verdict
from the quick sets, and why two verdicts differ where they do. Only trials
run from committed code count (a trial whose commit ends in ``-dirty`` is
left out, and counted). docs/validation.md opens with its output.
"""

from __future__ import annotations

from .judge import Result

#: Verdicts that say the check could not decide or did not run.
OPEN = ("inconclusive", "not measured", "direction reproduced, size undecided")


#: The longest measured figure a cell shows (a largest-effect check's list of effects is longer).
MEASURED_CHARS = 80


def _md(text: str) -> str:
    """Text safe inside a Markdown table cell."""
    return text.replace("|", "\\|").replace("\n", " ")


def _cell(r: Result | None) -> str:
    if r is None:
        return "-"
    if r.verdict == "not measured":
        return "not measured"
    measured = r.measured if r.check.kind == "largest_effect" else r.measured.split(" (")[0]
    if len(measured) > MEASURED_CHARS:
        measured = measured[:MEASURED_CHARS - 1].rstrip() + "…"
    return _md(f"{r.verdict}: {measured} (n = {r.n})")


def why(full: Result | None, quick: Result | None) -> str:
    """Why the two verdicts of a check differ ("" where they agree)."""
    if full is None or quick is None or full.verdict == quick.verdict:
        return ""
    if quick.verdict == "not measured":
        return "not in the quick sets"
    if full.verdict == "not measured":
        return "not in the full sets"
    if quick.verdict in OPEN and quick.n < full.n:
        return f"the quick sets' {quick.n} trials decide less than the full sets' {full.n}"
    if full.verdict in OPEN and full.n < quick.n:
        return f"the full sets' {full.n} trials decide less than the quick sets' {quick.n}"
    if quick.verdict in OPEN or full.verdict in OPEN:
        return "one interval straddles the boundary" + (f"; {quick.split or full.split}" if quick.split or full.split
                                                        else "")
    return "the sets measure different cells or sizes: the study's section below"


def markdown(full: list[Result], quick: list[Result], dirty_full: dict[str, int], dirty_quick: dict[str, int],
             studies: list[str]) -> str:
    """The tables, study by study, with the trials left out as run from uncommitted code."""
    fq = {(r.claim.id, r.check.label): r for r in full}
    qq = {(r.claim.id, r.check.label): r for r in quick}
    order = list(dict.fromkeys([*fq, *qq]))
    out = []
    for study in studies:
        rows = [k for k in order if (fq.get(k) or qq[k]).claim.study == study]
        if not rows:
            continue
        left = f"{dirty_full.get(study, 0)} full and {dirty_quick.get(study, 0)} quick trials left out"
        out.append(f"### Study {study}\n\n{left} (run from uncommitted code).\n")
        out.append("| claim | check | full presets | quick sets | why they differ |")
        out.append("|---|---|---|---|---|")
        for k in rows:
            f, q = fq.get(k), qq.get(k)
            out.append(f"| {k[0]} | {_md(k[1])} | {_cell(f)} | {_cell(q)} | {_md(why(f, q))} |")
        counts: dict[str, int] = {}
        for k in rows:
            if (r := fq.get(k)) is not None:
                counts[r.verdict] = counts.get(r.verdict, 0) + 1
        out.append("\nFull presets: " + ", ".join(f"{n} {v}" for v, n in sorted(counts.items(), key=lambda x: -x[1]))
                   + ".\n")
    return "\n".join(out)


__all__ = ["markdown", "why"]
