#!/usr/bin/env python3
"""Production Rust code over the size limits of issue 40: functions over
120 lines and files over 1000 lines, in crates/*/src and python/src.

Production code is each file less its `#[cfg(test)]` inline modules; files
declared as `#[cfg(test)] mod name;` are left out whole. Tests, benches,
examples and fuzz targets live outside those folders and are not read.

A function's length runs from the line of its `fn` to the line of its
closing brace, both included (a trait method without a body has none). A
file's length is its production lines (its total is printed beside it).

Prints one line per function or file over its limit and exits 1 if there
is any, 0 otherwise. Usage: scripts/sizes.py [--fn-limit N] [--file-limit N]
"""

import argparse
import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def code_only(text):
    """`text` with comments, string and char literals blanked (newlines kept)."""
    out = []
    i, n = 0, len(text)

    def blank(c):
        out.append("\n" if c == "\n" else " ")

    while i < n:
        c = text[i]
        if text.startswith("//", i):
            while i < n and text[i] != "\n":
                out.append(" ")
                i += 1
        elif text.startswith("/*", i):
            depth = 0
            while i < n:
                if text.startswith("/*", i):
                    depth += 1
                    out.append("  ")
                    i += 2
                elif text.startswith("*/", i):
                    depth -= 1
                    out.append("  ")
                    i += 2
                    if depth == 0:
                        break
                else:
                    blank(text[i])
                    i += 1
        elif c == "r" and (i == 0 or not is_ident(text[i - 1]) or text[i - 1] == "b") and re.match(r'r#*"', text[i:]):
            m = re.match(r'r(#*)"', text[i:])
            close = '"' + m.group(1)
            end = text.find(close, i + len(m.group(0)))
            end = n if end < 0 else end + len(close)
            for ch in text[i:end]:
                blank(ch)
            i = end
        elif c == '"':
            blank(c)
            i += 1
            while i < n and text[i] != '"':
                if text[i] == "\\":
                    blank(text[i])
                    i += 1
                if i < n:
                    blank(text[i])
                    i += 1
            if i < n:
                out.append(" ")
                i += 1
        elif c == "'" and (text[i + 2 : i + 3] == "'" or text[i + 1 : i + 2] == "\\"):
            if text[i + 1 : i + 2] == "\\":
                end = text.find("'", i + 3)
                end = n if end < 0 else end + 1
            else:
                end = i + 3
            for ch in text[i:end]:
                blank(ch)
            i = end
        else:
            out.append(c)
            i += 1
    return "".join(out)


def is_ident(c):
    return c.isalnum() or c == "_"


def matching_brace(code, open_at):
    """The index of the `}` that closes the `{` at `open_at`."""
    depth = 0
    for k in range(open_at, len(code)):
        if code[k] == "{":
            depth += 1
        elif code[k] == "}":
            depth -= 1
            if depth == 0:
                return k
    return len(code) - 1


def without_tests(code):
    """`code` with its `#[cfg(test)]` inline modules blanked, and the
    names of the `#[cfg(test)] mod name;` files it declares."""
    test_files = []
    out = list(code)
    for m in re.finditer(r"#\[cfg\(test\)\]\s*(?:pub(?:\([^)]*\))?\s+)?mod\s+(\w+)\s*([;{])", code):
        if m.group(2) == ";":
            test_files.append(m.group(1))
            continue
        end = matching_brace(code, m.end() - 1)
        for k in range(m.start(), end + 1):
            if out[k] != "\n":
                out[k] = " "
    return "".join(out), test_files


def functions(code):
    """(name, first line, last line) of every function with a body."""
    found = []
    for m in re.finditer(r"\bfn\s+(\w+)", code):
        # The body's `{`, or the `;` of a declaration, outside the
        # signature's parentheses and generics.
        depth = 0
        k = m.end()
        while k < len(code):
            c = code[k]
            if c in "([":
                depth += 1
            elif c in ")]":
                depth -= 1
            elif depth == 0 and c == ";":
                break
            elif depth == 0 and c == "{":
                end = matching_brace(code, k)
                first = code.count("\n", 0, m.start()) + 1
                last = code.count("\n", 0, end) + 1
                found.append((m.group(1), first, last))
                break
            k += 1
    return found


def production_files():
    dirs = sorted(p / "src" for p in (ROOT / "crates").iterdir() if (p / "src").is_dir())
    dirs.append(ROOT / "python" / "src")
    files = sorted(f for d in dirs for f in d.rglob("*.rs"))
    read = {}
    test_only = set()
    for f in files:
        code, tests = without_tests(code_only(f.read_text(encoding="utf-8")))
        read[f] = code
        here = f.parent if f.stem in ("mod", "lib", "main") else f.with_suffix("")
        for t in tests:
            test_only.add(here / f"{t}.rs")
            test_only.add(here / t / "mod.rs")
    return [(f, read[f]) for f in files if f not in test_only]


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--fn-limit", type=int, default=120)
    ap.add_argument("--file-limit", type=int, default=1000)
    args = ap.parse_args()
    over = 0
    for f, code in production_files():
        rel = f.relative_to(ROOT)
        for name, first, last in functions(code):
            lines = last - first + 1
            if lines > args.fn_limit:
                print(f"function {rel}:{first} {name}: {lines} lines (limit {args.fn_limit})")
                over += 1
        total = f.read_text(encoding="utf-8").count("\n")
        # Production lines: those with code left, or blank/comment lines
        # outside the test modules (a blanked test module leaves only
        # whitespace, which is what is subtracted).
        production = total - blanked_test_lines(f, code)
        if production > args.file_limit:
            print(f"file {rel}: {production} production lines ({total} in all; limit {args.file_limit})")
            over += 1
    print(f"{over} over the limits", file=sys.stderr)
    return 1 if over else 0


def blanked_test_lines(f, code):
    """Lines of `f` inside its `#[cfg(test)]` inline modules."""
    raw = code_only(f.read_text(encoding="utf-8"))
    lines = 0
    for m in re.finditer(r"#\[cfg\(test\)\]\s*(?:pub(?:\([^)]*\))?\s+)?mod\s+(\w+)\s*\{", raw):
        end = matching_brace(raw, m.end() - 1)
        lines += raw.count("\n", m.start(), end) + 1
    return lines


if __name__ == "__main__":
    sys.exit(main())
