"""Every relative link of README.md, docs/*.md and bench/README.md resolves:
the file or directory it names exists in the repository, and an anchor
(`FILE.md#heading`, or `#heading` on the same page) names a heading of that
page as GitHub renders it.  Links inside code are not links."""
import re
from urllib.parse import unquote

from test_readme import PAGES, ROOT

LINK = re.compile(r"!?\[(?:[^\[\]]|\[[^\]]*\])*\]\(\s*<?([^()\s>]+)>?(?:\s+\"[^\"]*\")?\s*\)")
EXTERNAL = re.compile(r"^[a-z][a-z0-9+.-]*:", re.I)  # https:, mailto:, …


def without_code(text):
    """The page without fenced blocks and inline code, line numbers kept."""
    text = re.sub(r"^(```+).*?^\1\s*$", lambda m: "\n" * m.group(0).count("\n"), text, flags=re.S | re.M)
    return re.sub(r"`[^`\n]*`", "", text)


def slug(heading):
    """The anchor GitHub gives a heading: lower case, punctuation dropped
    but for hyphens and underscores, spaces become hyphens."""
    text = re.sub(r"<[^>]+>", "", heading.strip()).lower()
    text = re.sub(r"[^\w\- ]", "", text)
    return text.replace(" ", "-")


def heading_anchors(page):
    """The anchors of a page's headings (their inline code's text kept), a
    repeated heading numbered as GitHub numbers it."""
    seen, out = {}, set()
    in_code = False
    for line in page.read_text().split("\n"):
        if line.startswith("```"):
            in_code = not in_code
            continue
        m = None if in_code else re.match(r"^#{1,6}\s+(.*?)\s*#*\s*$", line)
        if not m:
            continue
        base = slug(m.group(1).replace("`", ""))
        n = seen.get(base, 0)
        seen[base] = n + 1
        out.add(base if n == 0 else f"{base}-{n}")
    return out


def broken_links(page, root=ROOT):
    """'page:line: target (why)' for each relative link of page that does not resolve."""
    bad = []
    for lineno, line in enumerate(without_code(page.read_text()).split("\n"), 1):
        for m in LINK.finditer(line):
            target = m.group(1)
            if EXTERNAL.match(target):
                continue
            path, _, anchor = target.partition("#")
            dest = (page.parent / unquote(path)).resolve() if path else page
            where = f"{page.relative_to(root)}:{lineno}: {target}"
            if root not in dest.parents and dest != root:
                bad.append(f"{where} (outside the repository)")
            elif not dest.exists():
                bad.append(f"{where} (no such file)")
            elif anchor and dest.suffix == ".md" and anchor not in heading_anchors(dest):
                bad.append(f"{where} (no heading #{anchor} there)")
    return bad


def test_every_relative_link_resolves():
    bad = [b for page in PAGES for b in broken_links(page)]
    assert bad == [], "\n".join(bad)


def test_a_broken_link_is_found(tmp_path):
    (tmp_path / "docs").mkdir()
    (tmp_path / "docs" / "A.md").write_text("# A page\n\n## Its `part`, here\n")
    page = tmp_path / "README.md"
    page.write_text("[ok](docs/A.md) [ok](docs/A.md#its-part-here) [ok](#top) ![ok](docs/)\n"
                    "[gone](docs/B.md)\n[bad anchor](docs/A.md#nothing)\n[up](../x.md)\n"
                    "`[code](not/a/link.md)` [web](https://example.com/x.md)\n\n# Top\n"
                    "```\n[in a block](nowhere.md)\n```\n")
    assert broken_links(page, tmp_path) == [
        "README.md:2: docs/B.md (no such file)",
        "README.md:3: docs/A.md#nothing (no heading #nothing there)",
        "README.md:4: ../x.md (outside the repository)",
    ]
