"""A mutation fuzzer for the recording importer (``satbench pages import``
and the replay layout after it), as fuzzkit is for the Rust parsers: seeds
(HARs and Web Page Replay archives of the shapes browsers and WPR write) are
mutated at the JSON level (a value replaced by a hostile one: ``..``, NUL,
huge or negative numbers, deep nesting, wrong types) and at the byte level
(flips, cuts, gzip around), and each mutant is imported into a fresh folder.

What must hold for every input: the import returns or raises InputError
(exit code 2, one line), nothing else; nothing is written outside its
``--out`` or the layout's folder; a single line is all the error says.

    python -m tests.fuzz_import [SECONDS] [SEED]    a long run (docs/benchmarks.md)

The unit tests run it for ``SATBENCH_IMPORT_FUZZ_SECONDS`` (default 3). A
failing input is written to ``SATBENCH_FUZZ_OUT`` (default the working
folder) as ``import-crash-N.bin``.
"""

from __future__ import annotations

import base64
import gzip
import json
import os
import random
import shutil
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from satbench.endpoints import sites
from satbench.errors import InputError

HOSTILE: list[Any] = ["..", "../../etc/passwd", "/etc/passwd", "a\0b", "con", "nul.txt", "x" * 300, "", " ",
                      "%2e%2e", "https://../x", "https://a.test/../../x", "https://a..test/", "https://[::1]/",
                      "https://[::1", "https://0x7f.1/", "http://a.test:99999/", "https://a.test:0/",
                      -1, 2**63, 10**12, 1e308, float("inf"), None, True, [], {}, "Infinity", "gzip", "br",
                      "deflate", "base64", "chunked"]


def seeds() -> list[tuple[str, bytes]]:
    def entry(url: str, text: str | None, mime: str = "text/html", headers: list[tuple[str, str]] = (),
              b64: bool = False, size: int = 0) -> dict[str, Any]:
        content: dict[str, Any] = {"mimeType": mime, "size": size or len(text or "")}
        if text is not None:
            content["text"] = text
            if b64:
                content["encoding"] = "base64"
        return {"request": {"method": "GET", "url": url, "headers": []},
                "response": {"status": 200, "headers": [{"name": k, "value": v} for k, v in
                                                       [("Content-Type", mime), *headers]],
                             "content": content, "bodySize": size},
                "timings": {"wait": 12.5}}

    har = {"log": {"version": "1.2", "creator": {"name": "fuzz", "version": "1"},
                   "pages": [{"id": "p", "title": "https://www.site.test/"}],
                   "entries": [entry("https://www.site.test/", "<html><img src=/a.png></html>"),
                               entry("https://cdn.site.test/a.png", base64.b64encode(b"\x89PNG....").decode(),
                                     "image/png", b64=True),
                               entry("http://www.site.test/", "", headers=[("Location", "https://www.site.test/")]),
                               entry("https://www.site.test/s.css", "h1{}", "text/css",
                                     [("Content-Encoding", "gzip"), ("Transfer-Encoding", "chunked")]),
                               entry("https://api.site.test:8443/x?cb=1", None, "application/json", size=300)]}}
    body = gzip.compress(b"<html>hi</html>")
    chunked = b"5\r\nhello\r\n0\r\n\r\n"
    wpr = {"Requests": {"www.site.test": {
        "https://www.site.test/": [{
            "SerializedRequest": base64.b64encode(b"GET / HTTP/1.1\r\nHost: www.site.test\r\n\r\n").decode(),
            "SerializedResponse": base64.b64encode(b"HTTP/1.1 200 OK\r\nContent-Type: text/html\r\n"
                                                   b"Content-Encoding: gzip\r\n\r\n" + body).decode()}],
        "https://www.site.test/c": [{
            "SerializedRequest": base64.b64encode(b"GET /c HTTP/1.1\r\n\r\n").decode(),
            "SerializedResponse": base64.b64encode(b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n"
                                                   + chunked).decode()}]}}}
    return [("seed.har", json.dumps(har).encode()), ("seed.har.gz", gzip.compress(json.dumps(har).encode())),
            ("seed.wprgo", gzip.compress(json.dumps(wpr).encode()))]


def _paths(doc: Any, at: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    out = [at]
    if len(at) > 12:  # (not into the deep nests the fuzzer itself plants)
        return out
    if isinstance(doc, dict):
        for k, v in doc.items():
            out += _paths(v, (*at, k))
    elif isinstance(doc, list):
        for i, v in enumerate(doc):
            out += _paths(v, (*at, i))
    return out


def _set(doc: Any, at: tuple[Any, ...], value: Any) -> Any:
    if not at:
        return value
    parent = doc
    for k in at[:-1]:
        parent = parent[k]
    parent[at[-1]] = value
    return doc


def _wpr_inner(doc: Any, rng: random.Random) -> Any:
    """A WPR archive's serialized messages, mutated inside their base64."""
    reqs = doc.get("Requests") if isinstance(doc, dict) else None
    for by_url in reqs.values() if isinstance(reqs, dict) else []:
        for xs in (by_url or {}).values() if isinstance(by_url, dict) else []:
            for x in xs if isinstance(xs, list) else []:
                if isinstance(x, dict) and isinstance(x.get("SerializedResponse"), str) and rng.random() < 0.5:
                    try:
                        raw = bytearray(base64.b64decode(x["SerializedResponse"]))
                    except ValueError:
                        continue
                    for _ in range(rng.randint(1, 4)):
                        if raw:
                            raw[rng.randrange(len(raw))] = rng.randrange(256)
                    x["SerializedResponse"] = base64.b64encode(bytes(raw)).decode()
    return doc


def mutate(name: str, data: bytes, rng: random.Random) -> bytes:
    gz = data[:2] == b"\x1f\x8b"
    raw = gzip.decompress(data) if gz else data
    if rng.random() < 0.75:
        doc = json.loads(raw)
        for _ in range(rng.randint(1, 4)):
            at = rng.choice(_paths(doc))
            choice = rng.random()
            if choice < 0.6:
                value: Any = rng.choice(HOSTILE)
            elif choice < 0.75:
                value = nested = []
                for _ in range(rng.choice((10, 100, 5000))):
                    nested.append([])
                    nested = nested[0]
            else:
                value = {"text": rng.choice(HOSTILE), "size": rng.choice(HOSTILE), "encoding": "base64"}
            doc = _set(doc, at, value)
        if name.endswith(".wprgo"):
            doc = _wpr_inner(doc, rng)
        try:
            raw = json.dumps(doc).encode()
        except (ValueError, RecursionError):
            raw = b"["
    else:
        b = bytearray(raw)
        for _ in range(rng.randint(1, 8)):
            op = rng.random()
            if op < 0.5 and b:
                b[rng.randrange(len(b))] = rng.randrange(256)
            elif op < 0.8 and b:
                del b[rng.randrange(len(b)):][:rng.randint(1, 64)]
            else:
                b[rng.randrange(len(b) + 1):0] = rng.choice([b"..", b"\\u0000", b"\x00", b"9" * 30, b"{[" * 50])
        raw = bytes(b)
    if gz or rng.random() < 0.1:
        out = gzip.compress(raw, 1)
        return out[:rng.randrange(len(out))] if rng.random() < 0.1 else out
    return raw


def _files(root: Path) -> set[str]:
    return {str(p.relative_to(root)) for p in root.rglob("*")}


def check(name: str, data: bytes, work: Path) -> str | None:
    """Import ``data`` as ``name`` in ``work``; what went wrong, or None."""
    src = work / name
    src.write_bytes(data)
    out, layout = work / "out", work / "layout"
    before = _files(work)
    # Every path the importer writes or makes, wherever it is, must lie under --out or the layout.
    written: list[Path] = []
    real = (sites.write_new, sites.real_folder, os.replace)

    def spy(f: Any, arg: int = 0) -> Any:
        def wrapped(*a: Any, **kw: Any) -> Any:
            written.append(Path(a[arg]))
            return f(*a, **kw)
        return wrapped

    sites.write_new, sites.real_folder, os.replace = spy(real[0]), spy(real[1]), spy(real[2], 1)
    try:
        sites.import_archive(src, out)
        if random.Random(name + str(len(data))).random() < 0.3:  # a site.json from elsewhere, mutated
            (out / "site.json").write_bytes(mutate("site.json", (out / "site.json").read_bytes(),
                                                   random.Random(len(data))))
        sites.materialize(out, layout)
    except InputError as e:
        if "\n" in str(e):
            return f"an error of several lines: {str(e)[:500]!r}"
    except RecursionError:
        return "RecursionError"
    except Exception as e:  # noqa: BLE001 - what the fuzzer is for
        return f"{type(e).__name__}: {str(e)[:500]}"
    finally:
        sites.write_new, sites.real_folder, os.replace = real
    outside = [str(p) for p in written if not any(p.resolve().is_relative_to(d.resolve()) for d in (out, layout))]
    if outside:
        return f"wrote outside --out: {outside[:5]}"
    if (out / "site.json").exists() and not any(p.name == "site.json" for p in written):
        return "the fuzzer's watch on writes saw none"  # (so that it cannot pass by watching nothing)
    stray = {f for f in _files(work) - before if not f.startswith(("out", "layout"))}
    if stray:
        return f"written outside --out: {sorted(stray)[:5]}"
    if any(not (work / f).resolve().is_relative_to(work.resolve()) for f in _files(work)):
        return "a path resolving outside the work folder"
    return None


def run(seconds: float, seed: int = 1) -> tuple[int, list[str]]:
    """Fuzz for ``seconds``; the inputs tried and the failures (each saved)."""
    rng = random.Random(seed)
    pool = seeds()
    failures: list[str] = []
    tried = 0
    end = time.monotonic() + seconds
    keep = Path(os.environ.get("SATBENCH_FUZZ_OUT", "."))
    with tempfile.TemporaryDirectory(prefix="satbench-fuzz-import-") as tmp:
        while time.monotonic() < end:
            name, data = rng.choice(pool)
            mutant = mutate(name, data, rng)
            work = Path(tmp, str(tried))
            work.mkdir()
            what = check(name, mutant, work)
            shutil.rmtree(work, ignore_errors=True)
            tried += 1
            if what is not None:
                path = keep / f"import-crash-{len(failures)}-{name}"
                path.write_bytes(mutant)
                failures.append(f"{path}: {what}")
    return tried, failures


def main(argv: list[str]) -> int:
    seconds = float(argv[0]) if argv else 60.0
    seed = int(argv[1]) if len(argv) > 1 else int(time.time())
    tried, failures = run(seconds, seed)
    print(f"fuzz import: {tried} inputs in {seconds:g} s (seed {seed}), {len(failures)} failures")
    for f in failures[:20]:
        print(f"  {f}")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
