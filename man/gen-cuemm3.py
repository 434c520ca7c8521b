#!/usr/bin/env python3
"""gen-cuemm3.py HEADER [PROSE] > cuemm.3: the cuemm(3) manual page, made from
include/cuemm.h and man/cuemm3-prose.txt.

Why generated: cuemm.h is where every public function is documented (what
it does, its errors, its thread-safety), and new functions land there first.
A page written by hand drifts from it; this one is the header's own text,
laid out for man(1), so a function added to the header is on the page at
the next build.  Makefile.am runs this when the header changes and ships
the result in the tarball, so a build from the tarball needs no Python;
tests/test-man.sh fails when a function declared in the header is missing
from the page or the page is stale.

The header says what each function does in a few lines; what takes more
(how the policies work, the semantics of each path, the byte layout of an
IPC handle, the configuration's fields at length) is in PROSE (default:
cuemm3-prose.txt beside this script), so that the header stays a page a
reader scans and the manual stays complete.

Layout: NAME, SYNOPSIS (every function, one line each), DESCRIPTION (the
header's opening comment), then one subsection per section of the header
(the banner comments "/* ---- */" + "/* Title */"), each declaration in
bold followed by the comment above it, and each type and constant as code;
then the sections of PROSE.  PROSE is plain text: "# TITLE" starts a
section, "## Title" a subsection, "@ term" a tagged paragraph (the lines
after it, up to a blank line); blank lines separate paragraphs, and lines
that start with a blank, or hold a run of three, keep their layout.
"""
import os
import re
import sys


def esc(s):
    """Text safe for troff: backslashes escaped, no request at line start."""
    s = s.replace("\\", "\\e")
    if s.startswith((".", "'")):
        s = "\\&" + s
    return s


def comment_text(lines):
    """The text of a /* ... */ comment, one string per line, frame removed."""
    out = []
    for i, l in enumerate(lines):
        l = l.rstrip()
        if i == 0:
            l = re.sub(r"^\s*/\*\s?", "", l)
        else:
            l = re.sub(r"^\s*\*(?!/)\s?", "", l)
        if l.endswith("*/"):
            l = l[:-2].rstrip()
        out.append(l)
    while out and not out[0].strip():
        out.pop(0)
    while out and not out[-1].strip():
        out.pop()
    return out


def is_pre(line):
    """Lines whose layout carries meaning (lists, columns) stay as they are."""
    return line[:1] == " " or "   " in line.strip()


def prose(lines, out):
    """Comment lines as troff: prose filled, indented or columned lines kept."""
    pre = False
    for l in lines:
        if not l.strip():
            if pre:
                out.append(".fi")
                pre = False
            out.append(".PP")
            continue
        want = is_pre(l)
        if want and not pre:
            out += [".nf"]
            pre = True
        elif not want and pre:
            out += [".fi"]
            pre = False
        out.append(esc(l if pre else l.strip()))
    if pre:
        out.append(".fi")


def parse(path):
    """The header as a list of items: ('title', text), ('comment', lines),
    ('code', lines), ('blank',)."""
    src = open(path, encoding="utf-8").read().split("\n")
    items, i, skip_pp = [], 0, 0
    while i < len(src):
        l = src[i]
        s = l.strip()
        if skip_pp:
            # inside #ifdef __cplusplus or the export macro's #if: not API
            if s.startswith("#if"):
                skip_pp += 1
            elif s.startswith("#endif"):
                skip_pp -= 1
            i += 1
            continue
        if not s:
            items.append(("blank",))
            i += 1
        elif s.startswith("/*"):
            j = i
            while "*/" not in src[j]:
                j += 1
            block = src[i:j + 1]
            i = j + 1
            if len(block) == 1 and re.match(r"^/\* -{10,} \*/$", s):
                continue
            m = re.match(r"^/\* (\S.*?\S)\s{2,}\*/$", s)
            if len(block) == 1 and m and len(s) >= 70:
                items.append(("title", m.group(1)))
                continue
            items.append(("comment", comment_text(block)))
        elif s.startswith("#"):
            if s.startswith("#ifdef __cplusplus") or s.startswith("#if defined(CUEMM_BUILDING)") \
                    or s.startswith("#if defined(CUEMM_NO_DEPRECATION_WARNINGS)"):
                skip_pp = 1
            elif re.match(r"#define CUEMM_(?!H\b|EXTERN\b)", s):
                block = [l]
                while block[-1].rstrip().endswith("\\"):
                    i += 1
                    block.append(src[i])
                items.append(("code", [re.sub(r"\s*\\$", "", b.rstrip()) for b in block]))
            i += 1
        else:
            block, depth = [], 0
            while True:
                block.append(src[i])
                depth += src[i].count("{") - src[i].count("}")
                i += 1
                if depth <= 0 and src[i - 1].rstrip().endswith(";"):
                    break
            items.append(("code", block))
    return items


FUNC = re.compile(r"\b(cuemm_[a-z0-9_]+)\s*\(")


def function_of(code):
    """The name of the function a code item declares, or None."""
    text = " ".join(code)
    if text.lstrip().startswith(("typedef", "#")):
        return None
    m = FUNC.search(text)
    return m.group(1) if m else None


def prototype(code):
    text = " ".join(x.strip() for x in code)
    text = re.sub(r"^CUEMM_EXTERN\s+", "", text)
    return re.sub(r"\s+", " ", text)


def prose_file(path, out):
    """The sections of the prose file, as troff."""
    lines = open(path, encoding="utf-8").read().split("\n")
    para = []

    def flush():
        if para:
            prose(para, out)
            del para[:]

    tagged = False
    for l in lines:
        if l.startswith("# "):
            flush()
            out.append(".SH " + esc(l[2:].strip()))
        elif l.startswith("## "):
            flush()
            out.append(".SS " + esc(l[3:].strip()))
        elif l.startswith("@ "):
            flush()
            out += [".TP", ".B " + esc(l[2:].strip())]
            tagged = True
        elif not l.strip():
            flush()
            if tagged:
                tagged = False
        else:
            para.append(l)
    flush()


def main():
    header = sys.argv[1]
    prose_path = sys.argv[2] if len(sys.argv) > 2 else \
        os.path.join(os.path.dirname(os.path.abspath(__file__)), "cuemm3-prose.txt")
    items = parse(header)
    version = {}
    for kind, *rest in items:
        if kind == "code":
            m = re.match(r"#define CUEMM_VERSION_(MAJOR|MINOR|PATCH) (\d+)", rest[0][0])
            if m:
                version[m.group(1)] = m.group(2)
    ver = ".".join(version.get(k, "0") for k in ("MAJOR", "MINOR", "PATCH"))

    out = [
        '.\\" cuemm.3: generated from include/cuemm.h by man/gen-cuemm3.py; edit the header, not this file.',
        '.TH CUEMM 3 "" "cuemm %s" "cuemm manual"' % ver,
        ".SH NAME",
        "cuemm \\- device memory management for CUDA driver\\-API programs",
        ".SH SYNOPSIS",
        ".nf",
        ".B #include <cuemm.h>",
        ".PP",
    ]
    for kind, *rest in items:
        if kind == "code" and function_of(rest[0]):
            out.append(".B " + esc(prototype(rest[0])))
    out += [".fi", ".PP", "Link with \\fB\\-lcuemm\\fP (\\fBpkg\\-config \\-\\-cflags \\-\\-libs cuemm\\fP)."]

    # The opening comment is the description; the rest follows section by
    # section, each run of items without a blank line between them a block.
    first = next(k for k, it in enumerate(items) if it[0] == "comment")
    out.append(".SH DESCRIPTION")
    prose(items[first][1][1:] if items[first][1][0].startswith("cuemm.h:") else items[first][1], out)
    out.append(".SH FUNCTIONS AND TYPES")
    blocks, cur = [], []
    for it in items[first + 1:]:
        if it[0] in ("blank", "title"):
            if cur:
                blocks.append(cur)
                cur = []
            if it[0] == "title":
                blocks.append([it])
        else:
            cur.append(it)
    if cur:
        blocks.append(cur)
    for b in blocks:
        if b[0][0] == "title":
            out.append(".SS " + esc(b[0][1]))
            continue
        # A comment above declarations describes them: declarations first,
        # as a manual shows them, then the comment, indented.
        kinds = [it[0] for it in b]
        if "code" in kinds and "comment" in kinds and kinds.index("code") > 0 \
                and all(k == "code" for k in kinds[kinds.index("code"):]):
            order = b[kinds.index("code"):] + b[:kinds.index("code")]
            indent = True
        else:
            order, indent = b, False
        out.append(".PP")
        in_rs = False
        for it in order:
            if it[0] == "code":
                out.append(".nf")
                if function_of(it[1]):
                    out.append(".B " + esc(prototype(it[1])))
                else:
                    out += [esc(x.rstrip()) if x.strip() else "" for x in it[1]]
                out.append(".fi")
            else:
                if indent and not in_rs:
                    out.append(".RS")
                    in_rs = True
                prose(it[1], out)
        if in_rs:
            out.append(".RE")

    if os.path.exists(prose_path):
        prose_file(prose_path, out)

    out += [
        ".SH ENVIRONMENT",
        "Every CUEMM_* variable, its accepted values and its default: "
        "\\fBcuemm\\fP(7).",
        ".SH SEE ALSO",
        "\\fBcuemm\\-replay\\fP(1), \\fBcuemm\\fP(7); the documentation in the "
        "source tree's README.md and docs/.",
    ]
    # Empty lines in code blocks would be read as a blank-line request.
    sys.stdout.write("\n".join(x if x != "" else ".sp" for x in out) + "\n")


if __name__ == "__main__":
    main()
