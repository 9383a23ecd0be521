#!/usr/bin/env python3
"""Links that lead nowhere: every relative link in the repository's markdown,
and every file mention in the Rust module docs, must name a file that exists
and, for a markdown file with an #anchor, a heading of that file.

Checked (files tracked by git, outside .cache, target and .venv):
- `*.md`: markdown links `[text](target)`, images and reference definitions
  `[id]: target` with a relative target, resolved from the linking file's
  directory; `#anchor` alone is the same file. http(s):, mailto: and other
  URLs are not checked. Code spans and fenced code blocks are not markdown.
- `*.rs`: lines whose first non-blank characters are `//!`: markdown links
  `](target)` resolved from the .rs file's directory (rustdoc intra-doc links
  such as `(crate::x)` are left to rustdoc), and any bare mention of
  `docs/….md`, `README.md` or `CONTRIBUTING.md`, with an optional `#anchor`,
  taken from the repository root (`//! See docs/design.md#the-engine.`).

Anchors follow GitHub's rules: the heading's text, lowercased, with every
character other than a letter, digit, space, hyphen or underscore removed and
spaces turned into hyphens; a repeated heading gets -1, -2, ...; an HTML
`<a name="…">` or `id="…"` counts too.

Prints `file:line: target: why` for each broken one and exits 1 if any.
`--self-test` runs the checker on a scratch repository with one good and one
bad link of each kind and exits 1 unless it finds exactly the bad ones.
`make lint` runs both.
"""
import os
import re
import subprocess
import sys
import tempfile
from urllib.parse import unquote

EXCLUDED_DIRS = {".cache", "target", ".venv"}

FENCE = re.compile(r"^ {0,3}(`{3,}|~{3,})")
ATX_HEADING = re.compile(r"^ {0,3}(#{1,6})(?:[ \t]+(.*?))?[ \t]*$")
SETEXT_UNDERLINE = re.compile(r"^ {0,3}(=+|-+)[ \t]*$")
HTML_ANCHOR = re.compile(r"""<a\s[^>]*\b(?:name|id)\s*=\s*["']([^"']+)["']""", re.I)
CODE_SPAN = re.compile(r"(`+)(.+?)\1")
# [text](target) or ![alt](target); the target up to whitespace or the closing
# parenthesis, allowing one level of balanced parentheses inside it.
INLINE_LINK = re.compile(r"!?\[(?:[^\[\]]|\[[^\[\]]*\])*\]\(\s*(<[^>]*>|(?:[^()\s]|\([^()\s]*\))*)(?:\s+[\"'(][^)]*)?\s*\)")
REFERENCE_DEF = re.compile(r"^ {0,3}\[[^\]]+\]:\s*(<[^>]*>|\S+)")
RS_DOC = re.compile(r"^\s*//!(.*)$")
RS_LINK = re.compile(r"\]\(\s*(<[^>]*>|(?:[^()\s]|\([^()\s]*\))*)(?:\s+[\"'][^)]*)?\s*\)")
RS_MENTION = re.compile(r"(?<![\w./-])((?:docs/[\w./-]+\.md|README\.md|CONTRIBUTING\.md)(#[\w-]+)?)")
URL_SCHEME = re.compile(r"^[A-Za-z][A-Za-z0-9+.-]*:")


def slug(text):
    """GitHub's anchor for a heading's text."""
    text = re.sub(r"!?\[([^\]]*)\]\([^)]*\)", r"\1", text)  # a link shows its text
    text = re.sub(r"<[^>]+>", "", text)  # inline HTML tags show nothing
    text = text.strip().lower()
    text = re.sub(r"[^\w\- ]", "", text)
    return text.replace(" ", "-")


def markdown_lines(text):
    """(line number, line) of the lines outside fenced code blocks."""
    fence = None
    for number, line in enumerate(text.splitlines(), 1):
        m = FENCE.match(line)
        if fence is None:
            if m:
                fence = m.group(1)
                continue
            yield number, line
        elif m and m.group(1)[0] == fence[0] and len(m.group(1)) >= len(fence) \
                and not line.strip()[len(m.group(1)):].strip():
            fence = None


def anchors_of(text):
    """Every anchor a markdown text defines."""
    anchors, seen = set(), {}
    previous = None
    for _, line in markdown_lines(text):
        heading = None
        m = ATX_HEADING.match(line)
        if m:
            heading = re.sub(r"[ \t]+#+$", "", m.group(2) or "")
        elif previous is not None and previous.strip() and SETEXT_UNDERLINE.match(line) \
                and not ATX_HEADING.match(previous):
            heading = previous.strip()
        if heading is not None:
            base = slug(heading)
            n = seen.get(base, 0)
            anchors.add(base if n == 0 else f"{base}-{n}")
            seen[base] = n + 1
        for a in HTML_ANCHOR.findall(line):
            anchors.add(a)
        previous = line
    return anchors


class Checker:
    def __init__(self, root):
        self.root = os.path.abspath(root)
        self.anchor_cache = {}
        self.errors = []

    def anchors(self, path):
        if path not in self.anchor_cache:
            with open(path, encoding="utf-8", errors="replace") as f:
                self.anchor_cache[path] = anchors_of(f.read())
        return self.anchor_cache[path]

    def report(self, rel, number, target, why):
        self.errors.append((rel, number, target, why))

    def check_target(self, rel, number, target, base_dir, same_file):
        """A link target: a path (relative to base_dir) with an optional #anchor."""
        if target.startswith("<") and target.endswith(">"):
            target = target[1:-1]
        if not target or URL_SCHEME.match(target) or target.startswith("//"):
            return
        path, _, anchor = target.partition("#")
        path = unquote(path.split("?", 1)[0])
        if path:
            full = os.path.normpath(os.path.join(base_dir, path))
        else:
            full = same_file
        if not os.path.exists(full):
            self.report(rel, number, target, "no such file")
            return
        if anchor and full.endswith(".md") and os.path.isfile(full):
            if unquote(anchor) not in self.anchors(full):
                self.report(rel, number, target, f"no heading with anchor #{anchor} in "
                            + os.path.relpath(full, self.root))

    def check_markdown(self, rel):
        full = os.path.join(self.root, rel)
        with open(full, encoding="utf-8", errors="replace") as f:
            text = f.read()
        base = os.path.dirname(full)
        for number, line in markdown_lines(text):
            line = CODE_SPAN.sub("", line)
            for m in INLINE_LINK.finditer(line):
                self.check_target(rel, number, m.group(1), base, full)
            m = REFERENCE_DEF.match(line)
            if m:
                self.check_target(rel, number, m.group(1), base, full)

    def check_rust(self, rel):
        full = os.path.join(self.root, rel)
        with open(full, encoding="utf-8", errors="replace") as f:
            lines = f.read().splitlines()
        base = os.path.dirname(full)
        for number, line in enumerate(lines, 1):
            m = RS_DOC.match(line)
            if not m:
                continue
            doc = m.group(1)
            for link in RS_LINK.finditer(CODE_SPAN.sub("", doc)):
                target = link.group(1).strip("<>")
                if is_intra_doc(target):
                    continue
                self.check_target(rel, number, target, base, full)
            for mention in RS_MENTION.finditer(doc):
                self.check_target(rel, number, mention.group(1), self.root, full)

    def run(self, files):
        for rel in files:
            if rel.endswith(".md"):
                self.check_markdown(rel)
            elif rel.endswith(".rs"):
                self.check_rust(rel)
        return self.errors


def is_intra_doc(target):
    """A rustdoc intra-doc link (`crate::x`, `Foo`, `fn@bar`, `baz()`), not a file."""
    if "::" in target or "@" in target or target.endswith(("()", "!")):
        return True
    path = target.split("#", 1)[0]
    return bool(path) and "/" not in path and "." not in path


def tracked_files(root):
    out = subprocess.run(["git", "ls-files", "-z", "--", "*.md", "*.rs"], cwd=root,
                         check=True, capture_output=True).stdout.decode()
    files = []
    for rel in out.split("\0"):
        if not rel or set(rel.split("/")[:-1]) & EXCLUDED_DIRS:
            continue
        if os.path.isfile(os.path.join(root, rel)):  # deleted in the work tree: nothing to check
            files.append(rel)
    return sorted(files)


def check(root):
    return Checker(root).run(tracked_files(root))


SELF_TEST_FILES = {
    "README.md": """# Top

## Same heading
## Same heading
## What is `exactly once`, and what not?

[good file](docs/page.md)
[bad file](docs/missing.md)
[good anchor here](#same-heading-1)
[bad anchor here](#same-heading-2)
[good anchor there](docs/page.md#a-page-heading)
[bad anchor there](docs/page.md#no-such-heading)
[good punctuation](#what-is-exactly-once-and-what-not)
[good reference]
[bad reference][bad]
[external](https://example.com/nowhere.md) `[in code](nowhere.md)`

[good reference]: docs/page.md
[bad]: docs/gone.md

```sh
# Not a heading
[in a fence](nowhere.md)
```

[bad anchor to a fenced line](#not-a-heading)
""",
    "docs/page.md": """# A page heading

[good up](../README.md#top)
[bad up](README.md)
""",
    "crates/x/src/lib.rs": """//! [good link](../../../docs/page.md) and [intra](crate::Thing) and [`Thing`](Thing).
//! [bad link](docs/page.md#a-page-heading)
//! Good mention: docs/page.md#a-page-heading, and README.md.
//! Bad mention: docs/page.md#nope.
//! Bad mention: docs/nothing.md and CONTRIBUTING.md.
/// Not a module doc: docs/ignored.md.
pub struct Thing;
""",
    "target/debug/build.md": "[excluded](nowhere.md)\n",
}

SELF_TEST_EXPECTED = {
    ("README.md", 8), ("README.md", 10), ("README.md", 12), ("README.md", 19),
    ("README.md", 26),
    ("docs/page.md", 4),
    ("crates/x/src/lib.rs", 2), ("crates/x/src/lib.rs", 4),
    ("crates/x/src/lib.rs", 5),
}


def self_test():
    with tempfile.TemporaryDirectory() as tmp:
        for rel, text in SELF_TEST_FILES.items():
            path = os.path.join(tmp, rel)
            os.makedirs(os.path.dirname(path), exist_ok=True)
            with open(path, "w", encoding="utf-8") as f:
                f.write(text)
        subprocess.run(["git", "init", "-q"], cwd=tmp, check=True)
        subprocess.run(["git", "add", "-f", "--", *SELF_TEST_FILES], cwd=tmp, check=True)
        errors = check(tmp)
    found = {(rel, number) for rel, number, _, _ in errors}
    # CONTRIBUTING.md (missing) and docs/nothing.md are on one line: both count.
    mentions_line5 = [e for e in errors if e[:2] == ("crates/x/src/lib.rs", 5)]
    ok = found == SELF_TEST_EXPECTED and len(mentions_line5) == 2
    if not ok:
        print("check-links self-test FAILED", file=sys.stderr)
        for rel, number in sorted(SELF_TEST_EXPECTED - found):
            print(f"  missed: {rel}:{number}", file=sys.stderr)
        for rel, number, target, why in errors:
            if (rel, number) not in SELF_TEST_EXPECTED:
                print(f"  false alarm: {rel}:{number}: {target}: {why}", file=sys.stderr)
        if len(mentions_line5) != 2:
            print(f"  expected 2 errors on crates/x/src/lib.rs:5, got {len(mentions_line5)}",
                  file=sys.stderr)
        return 1
    print(f"check-links self-test: {len(errors)} bad links found, no good one flagged")
    return 0


def main(argv):
    if "--self-test" in argv:
        return self_test()
    root = subprocess.run(["git", "rev-parse", "--show-toplevel"], check=True,
                          capture_output=True, text=True).stdout.strip()
    errors = check(root)
    for rel, number, target, why in errors:
        print(f"{rel}:{number}: {target}: {why}")
    if errors:
        print(f"check-links: {len(errors)} broken link(s)", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
