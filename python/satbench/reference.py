"""The generated parts of docs/reference.md: every factor, every server option and every command,
from the code that defines them (the factor registry, :class:`ServerOptions`, the CLI's command
table), so the reference cannot drift from what satbench accepts.

``python -m satbench.reference`` rewrites the parts in place, between their markers; a unit test
(tests/unit/test_reference.py) fails while the file is stale."""

from __future__ import annotations

import argparse
import re
import sys
from pathlib import Path
from typing import Any

from . import prereq

PATH = prereq.REPO / "docs" / "reference.md"


def _cell(v: Any) -> str:
    text = "(required)" if v is None else f"`{v!r}`".replace("'", '"') if isinstance(v, str) else f"`{v}`"
    return text.replace("|", "\\|")


def _text(s: str) -> str:
    return " ".join(s.split()).replace("|", "\\|")


def factors() -> str:
    from .experiment.factors import FACTORS  # noqa: PLC0415 - the registry pulls in every path element

    rows = ["| factor | default | meaning |", "|---|---|---|"]
    rows += [f"| `{f.name}` | {_cell(f.default)} | {_text(f.meaning)} |" for f in FACTORS.values()]
    return "\n".join(rows)


def link_keys() -> str:
    from .link.profile import KEYS  # noqa: PLC0415

    return ", ".join(f"`{k}`" for k in sorted(KEYS))


def knob_families() -> str:
    from .testbed import knobs  # noqa: PLC0415

    return (f"hosts: {', '.join(f'`{r}`' for r in knobs.ROLES)}; offloads: "
            f"{', '.join(f'`{o}`' for o in sorted(knobs.OFFLOADS))}; sysctls matching "
            f"`{knobs.SYSCTL_RE.pattern}` that a network namespace has")


def server_options() -> str:
    from .endpoints import options  # noqa: PLC0415

    rows = ["| experiment key | flag (`satbench serve`, `shell`) | default | values | servers | meaning |",
            "|---|---|---|---|---|---|"]
    for f in options.fields():
        m = f.metadata
        key = f"`server.{f.name}`" if m["experiment"] else "(flag only)"
        values = ("true, false" if options.is_bool(f) else ", ".join(m["choices"]) if m["choices"]
                  else f"{m['lo']} to {m['hi']}")
        servers = ", ".join(sorted(s.value for s in m["servers"]))
        rows.append(f"| {key} | `{options.flag_of(f)}` | {_cell(f.default)} | {values} | {servers} | "
                    f"{_text(m['help'])} |")
    return "\n".join(rows)


def commands() -> str:
    from .cli import COMMANDS  # noqa: PLC0415

    out = []
    for c in COMMANDS:
        p = argparse.ArgumentParser(prog=f"satbench {c.name}", add_help=False)
        c.args(p)
        usage = p.format_usage().removeprefix("usage: ").strip()
        usage = re.sub(r"\s+", " ", usage)
        out.append(f"- **`satbench {c.name}`**: {_text(c.help)}.\n  `{usage}`")
    return "\n".join(out)


PARTS = {"factors": factors, "link-keys": link_keys, "knobs": knob_families, "server-options": server_options,
         "commands": commands}


def render(text: str) -> str:
    """``text`` with every generated part rewritten between ``<!-- generated: NAME -->`` and
    ``<!-- end: NAME -->``."""
    for name, make in PARTS.items():
        begin, end = f"<!-- generated: {name} -->", f"<!-- end: {name} -->"
        if begin not in text or end not in text:
            raise ValueError(f"{PATH}: no {begin} ... {end} section")
        head, rest = text.split(begin, 1)
        _, tail = rest.split(end, 1)
        text = f"{head}{begin}\n{make()}\n{end}{tail}"
    return text


def main(argv: list[str] | None = None) -> int:
    path = Path((argv or sys.argv[1:] or [str(PATH)])[0])
    text = path.read_text()
    new = render(text)
    if new != text:
        path.write_text(new)
        print(f"{path}: rewritten")
    else:
        print(f"{path}: current")
    return 0


if __name__ == "__main__":
    sys.exit(main())
