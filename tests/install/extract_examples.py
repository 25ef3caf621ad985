#!/usr/bin/env python3
"""Writes the C++ examples of Markdown pages (README.md, the user's guide in docs/) and of public
headers' comments to OUTDIR/NAME.cc.

usage: extract_examples.py OUTDIR FILE...

A Markdown file: every ```cpp block, as written. Its first line must be `// example: NAME`, so
that no C++ block of the user guide escapes compilation.
A header (include/elastra/x.h): the comment lines after a line `// example: NAME`, up to the first
line that is neither "//" alone nor "//" followed by an indented line; the comment marks and the
common indentation come off, and the file starts with an #include of that header.

Exits 1, naming the file and line, on a ```cpp block without a name, a name used twice, or a
header without an example.
"""
import os
import re
import sys
import textwrap

MARKER = re.compile(r"^// example: ([A-Za-z0-9_-]+)")


def fail(message):
    sys.stderr.write(f"extract_examples: {message}\n")
    sys.exit(1)


def markdown_examples(path, lines):
    i = 0
    while i < len(lines):
        if lines[i].strip() != "```cpp":
            i += 1
            continue
        start = i + 1
        end = start
        while end < len(lines) and lines[end].strip() != "```":
            end += 1
        if end == len(lines):
            fail(f"{path}:{i + 1}: a ```cpp block that never ends")
        marker = MARKER.match(lines[start]) if start < end else None
        if marker is None:
            fail(f"{path}:{i + 1}: a ```cpp block without '// example: NAME' as its first line")
        yield marker.group(1), start + 1, "".join(lines[start:end])
        i = end + 1


def header_examples(path, lines):
    include = path.split("include/", 1)[-1]
    found = False
    for i, line in enumerate(lines):
        marker = MARKER.match(line)
        if marker is None:
            continue
        body = []
        for next_line in lines[i + 1:]:
            text = next_line.rstrip("\n")
            if text == "//":
                body.append("")
            elif text.startswith("//  "):
                body.append(text[2:])
            else:
                break
        while body and body[-1] == "":
            body.pop()
        code = textwrap.dedent("\n".join(body)) + "\n"
        found = True
        yield marker.group(1), i + 1, f"#include <{include}>  // the header of this example\n\n" + code
    if not found:
        fail(f"{path}: no '// example: NAME' comment")


def main():
    if len(sys.argv) < 3:
        fail("usage: extract_examples.py OUTDIR FILE...")
    out = sys.argv[1]
    os.makedirs(out, exist_ok=True)
    seen = {}
    for path in sys.argv[2:]:
        with open(path) as f:
            lines = f.readlines()
        examples = markdown_examples if path.endswith(".md") else header_examples
        for name, line, code in examples(path, lines):
            if name in seen:
                fail(f"{path}:{line}: example '{name}' is also at {seen[name]}")
            seen[name] = f"{path}:{line}"
            with open(os.path.join(out, name + ".cc"), "w") as f:
                f.write(code)
    if not seen:
        fail("no examples found")
    print(" ".join(sorted(seen)))


if __name__ == "__main__":
    main()
