#!/usr/bin/env python3
"""Fails on a broken link in the book: usage check_links.py BUILT_DIR SRC_DIR
[MORE.md ...] (files outside the book whose links are checked too, e.g. the
README, which links into the book's chapters).

Every Markdown link of every chapter (outside code) is checked: a link to
another chapter (`locks.md`) must name a chapter of SUMMARY.md, an anchor
(`locks.md#errors`, `#errors`) must be an id of that chapter's built HTML
page (so mdBook's own heading ids are the reference), and a link to any
other file (`../../tests/api/locks.rs`, `console.png`) must name a file
that exists. Links to other sites are not followed. Every chapter must be
in SUMMARY.md, so that none is unreachable.
"""

import re
import sys
from pathlib import Path

LINK = re.compile(r"\]\(([^)\s]+)(?:\s+\"[^\"]*\")?\)")
ID = re.compile(r"""\sid=["']([^"']+)["']""")


def prose(text: str) -> list[tuple[int, str]]:
    """The lines of text outside fenced code, with inline code removed."""
    out = []
    fence = None
    for n, line in enumerate(text.split("\n"), 1):
        m = re.match(r"^\s*(```+|~~~+)", line)
        if m:
            if fence is None:
                fence = m.group(1)
            elif m.group(1).startswith(fence):
                fence = None
            continue
        if fence is None:
            out.append((n, re.sub(r"`[^`]*`", "``", line)))
    return out


def main() -> int:
    built, src = Path(sys.argv[1]), Path(sys.argv[2])
    summary = (src / "SUMMARY.md").read_text()
    chapters = {m for m in re.findall(r"\]\(([^)]+\.md)\)", summary)}
    errors = []
    ids: dict[str, set[str]] = {}

    def anchors(chapter: str) -> set[str]:
        if chapter not in ids:
            page = built / (chapter[:-3] + ".html")
            ids[chapter] = set(ID.findall(page.read_text())) if page.exists() else set()
        return ids[chapter]

    count = 0
    extra = [Path(p) for p in sys.argv[3:]]
    for md in sorted(src.rglob("*.md")) + extra:
        if md in extra:
            rel = ""
        else:
            rel = md.relative_to(src).as_posix()
            if rel != "SUMMARY.md" and not rel.startswith("reference/") and rel not in chapters:
                errors.append(f"{md}: not in SUMMARY.md")
        for n, line in prose(md.read_text()):
            for target in LINK.findall(line):
                if re.match(r"^[a-z]+:", target) or target.startswith("<"):
                    continue
                count += 1
                path, _, anchor = target.partition("#")
                where = f"{md}:{n}: {target}"
                if path == "":
                    if not rel:
                        continue  # an anchor of a file outside the book (the README)
                    chapter = rel
                elif path.endswith(".md") and (md.parent / path).resolve().is_relative_to(src.resolve()):
                    chapter = (md.parent / path).resolve().relative_to(src.resolve()).as_posix()
                    if chapter not in chapters and chapter != "SUMMARY.md":
                        errors.append(f"{where}: no such chapter in SUMMARY.md")
                        continue
                else:
                    if not (md.parent / path).exists():
                        errors.append(f"{where}: no such file")
                    continue
                if anchor and anchor not in anchors(chapter):
                    errors.append(f"{where}: no such anchor in {chapter}")
    print(f"book links: {count} checked, {len(errors)} broken")
    for e in errors:
        print("  " + e)
    return 1 if errors else 0


if __name__ == "__main__":
    sys.exit(main())
