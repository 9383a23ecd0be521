#!/usr/bin/env python3
"""No import circles inside a crate: builds each crate's module graph from
`use crate::`/`super::`/`self::` trees and inline `crate::x::` paths (re-exports
traced to the defining module) and reports every group of modules that import
one another in a loop; exits 1 if there is one. `make lint` runs it over every
crate; `--top` counts a module and its children as one, `-v` prints the edges.
A regex reading, not a parser: it is a guard against circles coming back, and
a false circle is fixed by naming the path differently. Test modules
(`#[cfg(test)] mod tests {..}` tails and `*_tests.rs`/`tests.rs`/`*_props.rs` files)
are left out; the crate root is left out as a node (every module may use its items)."""
import os, re, sys

def strip_comments(s):
    s = re.sub(r'/\*.*?\*/', '', s, flags=re.S)
    s = re.sub(r'//[^\n]*', '', s)
    s = re.sub(r'"(?:\\.|[^"\\])*"', '""', s)
    return s

def cut_tests(s):
    m = re.search(r'#\[cfg\(test\)\]\s*(?:#\[[^\]]*\]\s*)*mod\s+\w+\s*\{', s)
    return s[:m.start()] if m else s

def modules(src):
    mods = {}
    for root, _, files in os.walk(src):
        for f in files:
            if not f.endswith('.rs'): continue
            p = os.path.join(root, f)
            rel = os.path.relpath(p, src)[:-3].split(os.sep)
            if rel[-1] in ('lib', 'main', 'mod'): rel = rel[:-1]
            if rel and (rel[-1].endswith('_tests') or rel[-1] in ('tests',) or rel[-1].endswith('_props')): continue
            mods[tuple(rel)] = p
    return mods

def split_tree(t):
    # split "a, b::{c, d}, e" at top level commas
    out, depth, cur = [], 0, ''
    for ch in t:
        if ch == '{': depth += 1
        if ch == '}': depth -= 1
        if ch == ',' and depth == 0:
            out.append(cur.strip()); cur = ''
        else: cur += ch
    if cur.strip(): out.append(cur.strip())
    return out

def expand(tree):
    """'a::{b, c::d}' -> [['a','b'], ['a','c','d']]"""
    tree = tree.strip()
    m = re.match(r'^([\w:]*?)(?:::)?\{(.*)\}$', tree, re.S)
    if m and '{' in tree:
        pre = [x for x in m.group(1).split('::') if x]
        res = []
        for part in split_tree(m.group(2)):
            for tail in expand(part):
                res.append(pre + tail)
        return res
    tree = re.sub(r'\s+as\s+\w+$', '', tree)
    return [[x for x in tree.split('::') if x]]

def paths_in(text):
    paths = []
    for m in re.finditer(r'\buse\s+((?:crate|super|self)\b[^;]*);', text, re.S):
        for p in expand(m.group(1)):
            paths.append(p)
    for m in re.finditer(r'(?<![\w:])((?:crate|super)(?:::\w+)+)', text):
        paths.append(m.group(1).split('::'))
    return paths

def resolve(path, here, mods, reexports):
    # returns module tuple or None
    base = list(here)
    segs = list(path)
    if segs[0] == 'crate': base = []; segs = segs[1:]
    else:
        while segs and segs[0] in ('super', 'self'):
            if segs[0] == 'super': base = base[:-1]
            segs = segs[1:]
    cur = tuple(base)
    for s in segs:
        if cur + (s,) in mods: cur = cur + (s,)
        else:
            # item: maybe re-exported
            key = (cur, s)
            if key in reexports: return reexports[key]
            break
    return cur

TOP = '--top' in sys.argv
def main(src):
    mods = modules(src)
    texts = {m: cut_tests(strip_comments(open(p).read())) for m, p in mods.items()}
    reexports = {}
    for m, t in texts.items():
        for u in re.finditer(r'\bpub(?:\([\w ]+\))?\s+use\s+([^;]*);', t, re.S):
            for p in expand(u.group(1)):
                if not p: continue
                tgt = resolve(p[:-1] if p[0] not in ('crate','super','self') else p[:-1], m, mods, {}) if p[0] in ('crate','super','self') else None
                if tgt is None:
                    cand = m + (p[0],)
                    if cand in mods:
                        tgt = m + tuple(x for x in p[:-1])
                        while tgt not in mods: tgt = tgt[:-1]
                if tgt is not None: reexports[(m, p[-1])] = tgt
    edges = {m: set() for m in mods}
    for m, t in texts.items():
        for p in paths_in(t):
            r = resolve(p, m, mods, reexports)
            if r is None or r == m or r == (): continue
            if r[:len(m)] == m: continue  # a parent naming its own children
            if TOP:
                a, b = m[:1], r[:1]
                if a != b: edges.setdefault(a, set()).add(b)
            else:
                edges[m].add(r)
    # Tarjan
    idx, low, st, on, comps, i = {}, {}, [], set(), [], [0]
    sys.setrecursionlimit(10000)
    def sc(v):
        idx[v] = low[v] = i[0]; i[0] += 1; st.append(v); on.add(v)
        for w in edges.get(v, ()):
            if w not in idx: sc(w); low[v] = min(low[v], low[w])
            elif w in on: low[v] = min(low[v], idx[w])
        if low[v] == idx[v]:
            c = []
            while True:
                w = st.pop(); on.discard(w); c.append(w)
                if w == v: break
            comps.append(c)
    for v in list(edges):
        if v != () and v not in idx: sc(v)
    name = lambda m: '::'.join(m) or 'crate'
    circles = [c for c in comps if len(c) > 1]
    if '-v' in sys.argv:
        for m in sorted(edges):
            if edges[m]: print('  ', name(m), '->', ', '.join(sorted(name(x) for x in edges[m])))
    for c in circles:
        print('CIRCLE', src, ':', ' <-> '.join(sorted(name(x) for x in c)))
    return len(circles)

if __name__ == '__main__':
    n = 0
    for src in [a for a in sys.argv[1:] if not a.startswith('-')]:
        n += main(src)
    print('import circles:', n)
    sys.exit(1 if n else 0)
