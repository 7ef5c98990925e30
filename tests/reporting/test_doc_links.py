"""Every relative link and image of README.md and docs/ leads somewhere, anchors included; docs/README.md lists all."""

import re
from pathlib import Path
from urllib.parse import unquote

import pytest

REPO = Path(__file__).resolve().parents[2]
PAGES = [REPO / "README.md", *sorted((REPO / "docs").rglob("*.md"))]
LINK = re.compile(r"!?\[(?:[^\[\]]|\[[^\]]*\])*\]\((?P<target>[^()\s]+)(?:\s+\"[^\"]*\")?\)")
FENCE = re.compile(r"^ {0,3}(`{3,}|~{3,})")


def _prose(text: str, spans: bool = False) -> str:
    """The page without fenced code and (unless `spans`) code spans, where a link is text."""
    kept, fence = [], ""
    for line in text.split("\n"):
        opening = FENCE.match(line)
        if opening and not fence:
            fence = opening.group(1)
        elif opening and line.strip().startswith(fence):
            fence = ""
        elif not fence:
            kept.append(line if spans else re.sub(r"`[^`]*`", "", line))
    return "\n".join(kept)


def _anchors(page: Path) -> set[str]:
    """GitHub's heading anchors: lower case, punctuation dropped, spaces to hyphens, repeats numbered."""
    headings = [re.match(r"^#{1,6}\s+(.*?)\s*#*\s*$", line)
                for line in _prose(page.read_text(encoding="utf-8"), spans=True).split("\n")]
    slugs = [re.sub(r"[^\w\- ]", "", h.group(1).strip().lower()).replace(" ", "-") for h in headings if h]
    return {f"{slug}-{slugs[:i].count(slug)}" if slug in slugs[:i] else slug for i, slug in enumerate(slugs)}


def _links(page: Path) -> list[str]:
    return [match["target"] for match in LINK.finditer(_prose(page.read_text(encoding="utf-8")))
            if not re.match(r"[a-z][a-z0-9+.-]*:", match["target"])]  # http:, https:, mailto: leave the repository


MACHINE_PATH = re.compile(r"(?<![\w.~-])/(?:work|root|home|tmp|Users)/[\w.-]")  # /mnt/nas/... in an example: no one's
REGISTRY_HOST = re.compile(r"pypi\.org|pythonhosted\.org|download\.pytorch\.org", re.I)


@pytest.mark.parametrize("page", PAGES, ids=lambda page: page.relative_to(REPO).as_posix())
def test_every_relative_link_and_anchor_resolves_and_no_machines_path_or_registry_host_is_named(page):
    """The manual speaks of the project: its own paths, not one machine's folders; installing goes through pip."""
    broken = []
    for target in _links(page):
        path, _, anchor = unquote(target).partition("#")
        file = (page.parent / path).resolve() if path else page
        if not file.exists():
            broken.append(f"{target}: no such file")
        elif anchor and file.suffix == ".md" and anchor not in _anchors(file):
            broken.append(f"{target}: no heading #{anchor} in {file.relative_to(REPO).as_posix()}")
    for number, line in enumerate(page.read_text(encoding="utf-8").splitlines(), start=1):
        if MACHINE_PATH.search(line) or REGISTRY_HOST.search(line):
            broken.append(f"line {number}: a machine's path or a registry's host: {line.strip()}")
    assert broken == []


def test_the_docs_index_lists_every_page():
    index = REPO / "docs/README.md"
    listed = {(index.parent / target.partition("#")[0]).resolve() for target in _links(index)}
    pages = {page.resolve() for page in (REPO / "docs").rglob("*.md") if page != index}
    assert sorted(page.relative_to(REPO).as_posix() for page in pages - listed) == []
