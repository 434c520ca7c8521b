#!/usr/bin/env python3
"""gen-cuemm-replay1.py SOURCE > cuemm-replay.1: the cuemm-replay(1) manual
page, made from the opening comment of tools/cuemm-replay.c.

Why generated: that comment is already written as a manual (NAME, SYNOPSIS,
DESCRIPTION, OPTIONS, ...) beside the option parser it describes, so an
option added to the program is documented where it is parsed and reaches
the page at the next build.  Makefile.am runs this when the source changes
and ships the result in the tarball, so a build from the tarball needs no
Python; tests/test-man.sh fails when an option the program accepts is
missing from the page or the page is stale.

The comment's form: section names in capitals at the comment's margin,
text two spaces in.  Under them, a line "TERM   description" (three or
more spaces between, two after an option) starts a tagged paragraph whose
description continues on the lines indented to it; other indented lines
(lists, columns) are kept as they are; the rest is prose.
"""
import re
import sys


def esc(s):
    s = s.replace("\\", "\\e")
    if s.startswith((".", "'")):
        s = "\\&" + s
    return s


def opt(s):
    """An option or command line in bold, its dashes as minus signs."""
    return esc(s).replace("-", "\\-")


def sections(path):
    lines = open(path, encoding="utf-8").read().split("\n")
    end = next(i for i, l in enumerate(lines) if l.strip() == "*/")
    body = [re.sub(r"^ \*( |$)", "", l) for l in lines[1:end]]
    out, name = [], None
    for l in body:
        if re.match(r"^[A-Z][A-Z ]+$", l):
            name = l
            out.append((name, []))
        elif name is not None:
            if not l.startswith("  ") and l.strip():
                break  # back at the margin: the comment's own notes follow
            out[-1][1].append(l[2:])
    for _, text in out:
        while text and not text[-1].strip():
            text.pop()
    return out


def render(text, out):
    i, pre, after_tp = 0, False, False
    while i < len(text):
        l = text[i]
        if not l.strip():
            if pre:
                out.append(".fi")
                pre = False
            out.append(".PP")
            after_tp = False
            i += 1
            continue
        # An option's term may be followed by two spaces only; others need three.
        m = re.match(r"^(-\S.*?\S)\s{2,}(\S.*)$", l) or re.match(r"^(\S.*?\S)\s{3,}(\S.*)$", l)
        if m and not l.startswith(" "):
            if pre:
                out.append(".fi")
                pre = False
            col = l.index(m.group(2))
            desc = [m.group(2)]
            i += 1
            while i < len(text) and text[i].strip() and len(text[i]) - len(text[i].lstrip()) >= col:
                desc.append(text[i].strip())
                i += 1
            out += [".TP", ".B " + opt(m.group(1))] + [esc(d) for d in desc]
            after_tp = True
            continue
        if after_tp:
            out.append(".PP")  # text after a list of options is a paragraph of its own
            after_tp = False
        want = l.startswith(" ")
        if want != pre:
            out.append(".nf" if want else ".fi")
            pre = want
        out.append(esc(l if pre else l.strip()))
        i += 1
    if pre:
        out.append(".fi")


def main():
    secs = sections(sys.argv[1])
    out = [
        '.\\" cuemm-replay.1: generated from tools/cuemm-replay.c by man/gen-cuemm-replay1.py; edit that comment, not this file.',
        '.TH CUEMM\\-REPLAY 1 "" "cuemm" "cuemm manual"',
    ]
    for name, text in secs:
        out.append(".SH " + name)
        if name == "NAME":
            prog, _, what = " ".join(t.strip() for t in text).partition(" - ")
            out.append(opt(prog) + " \\- " + esc(what))
        elif name == "SYNOPSIS":
            out.append(".nf")
            out += [".B " + opt(t.strip()) if t.startswith(PROG) else opt(t) for t in text]
            out.append(".fi")
        else:
            render(text, out)
    sys.stdout.write("\n".join(out) + "\n")


PROG = "cuemm-replay"

if __name__ == "__main__":
    main()
