#!/usr/bin/env python3
"""Remove each fsync / directory fsync call site in turn and show that a test fails.

The script finds the durability call sites itself: every call of `sync_all(`,
`sync_data(`, `fsync_dir(` and of the commit log's `log.sync()` in `src/` (outside
comments, `#[cfg(test)]` modules and the functions' own definitions). Each one must be
named in SITES (a label, which the README's fsync mutation table lists) or in NOT_MUTATED
(with the reason it is no mutant); a call site in neither, an entry that matches no call
site, or a label missing from the README's table fails the script (exit 2) before
anything is built.

For every site, this copies the committed tree (git archive HEAD) to a scratch
directory, replaces that one call expression with `Ok(())` (or the site's override),
runs the crash-point tests (TESTS) and records whether they failed ("caught") or passed
("SURVIVED": a call no test depends on). Prints a Markdown table; exits 1 if any mutant
survived or did not build.

    scripts/fsync_mutants.py [--list] [--only SUBSTRING] [--keep-going] [--debug]

`--list` prints the call sites found in the working tree and their mutants, checks the
tables above, and runs nothing. `--only` runs the sites whose label contains SUBSTRING.

Uses CARGO_TARGET_DIR (default /tmp/segstore-mutants-target) so rebuilds are
incremental. Takes a few minutes per mutant on a 2-core machine.
"""
import argparse
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time

# The crash-point test binaries a mutant must fail: every I/O operation of the store's
# workloads, of a checkpoint and of a drop loses power in turn.
TESTS = ["power_loss", "store_checkpoint", "store_drop_table", "ingest_power_loss"]

# What is a durability call.
CALL = re.compile(r"\.(sync_all|sync_data|fsync_dir)\(|\blog\.sync\(\)")
FN = re.compile(r"^\s*(?:pub(?:\([\w:]+\))?\s+)?(?:const\s+)?(?:unsafe\s+)?fn\s+(\w+)")
DEFINITION = re.compile(r"\bfn\s+(sync_all|sync_data|fsync_dir|sync)\s*[(<]")
OK = "Ok::<(), crate::error::Error>(())"

# (file, enclosing fn, call expression, occurrence within that fn) -> label. The label
# is what the README's table shows in its first column.
SITES = {
    ("src/table/lsm/ingest.rs", "place_all", "fs.fsync_dir(store_dir)", 0):
        "ingest: store directory after placing the files",
    ("src/segment/writer.rs", "finish_file", "w.get_ref().sync_all()", 0):
        "segment data and index files",
    ("src/segment/writer.rs", "finish", "mf.sync_all()", 0):
        "segment meta file",
    ("src/segment/writer.rs", "finish", "self.fs.fsync_dir(&self.dir)", 0):
        "segment: directory before the meta rename",
    ("src/segment/writer.rs", "finish", "self.fs.fsync_dir(&self.dir)", 1):
        "segment: directory after publishing",
    ("src/io/fs.rs", "write_atomic", "f.sync_all()", 0):
        "temp file in `write_atomic` (manifests, positions, journal)",
    ("src/io/fs.rs", "publish", 'self.fsync_dir(dest.parent().unwrap_or(Path::new(".")))', 0):
        "directory after a publish's rename",
    ("src/io/fs.rs", "create_dir_all", "self.fsync_dir(p)", 0):
        "parent of a created directory",
    ("src/io/fs.rs", "copy_durable", "f.sync_all()", 0):
        "copy (hard links refused)",
    ("src/snapshot/mod.rs", "create", "fs.fsync_dir(&root)", 0):
        "`snapshots/` after a snapshot's rename",
    ("src/store/snapshots.rs", "checkpoint", "fs.fsync_dir(&staging)", 0):
        "checkpoint: staging directory before its rename",
    ("src/store/snapshots.rs", "checkpoint", "fs.fsync_dir(parent)", 0):
        "checkpoint: parent directory after the rename into place",
    ("src/table/commitlog/mod.rs", "create_file", "fs.fsync_dir(dir)", 0):
        "commit log directory after a new file",
    ("src/table/commitlog/fsync.rs", "fsync", "file.sync_data()", 0):
        "commit log appends (batch, group, periodic, close)",
    ("src/lifecycle/deleter/journaling.rs", "write_journal", "self.inner.fs.fsync_dir(d)", 0):
        "deleter: directory before the journal forgets an unlink",
    ("src/table/lsm/maintenance.rs", "flush_frozen_locked", "self.ctx.log.sync()", 0):
        "commit log before a flush publishes its segment (periodic)",
    ("src/table/tables.rs", "checkpoint", "self.log.sync()", 0):
        "commit log before a checkpoint's positions",
    ("src/table/tables.rs", "drop_table", "self.ctx.log.sync()", 0):
        "commit log before a drop names its records (periodic)",
}

# Call sites with no mutant, and why.
NOT_MUTATED = {
    ("src/io/fs.rs", "fsync_dir", "File::open(dir)?.sync_all()", 0):
        "the OS call inside `StoreFs::fsync_dir`; under the simulator the fsync is "
        "recorded by `PowerLoss`, so each call of `fsync_dir` is mutated instead",
    ("src/io/fs.rs", "fsync_dir", "s.fsync_dir(dir, op)", 0):
        "the simulator's record inside `StoreFs::fsync_dir` (test tool)",
    ("src/io/fs.rs", "sync", "self.file.sync_data()", 0):
        "the OS call inside `FsFile::sync_data`; each caller is mutated instead",
    ("src/io/fs.rs", "sync", "self.file.sync_all()", 0):
        "the OS call inside `FsFile::sync_all`; each caller is mutated instead",
    ("src/io/powerloss.rs", "recover", "f.sync_all()", 0):
        "the power-loss simulator making its recovered state durable (test tool)",
}

# Sites whose mutant is not "the call expression becomes Ok(())": key -> replacement.
OVERRIDES = {}


def strip_comment(line):
    """The line without a `//` comment (string literals holding `//` are not expected)."""
    i = line.find("//")
    return line if i < 0 else line[:i] + " " * (len(line) - i)


def blank_test_modules(lines):
    """Blank every `#[cfg(test)]` item that is a `mod ... {` block."""
    out = list(lines)
    i = 0
    while i < len(out):
        if out[i].strip() == "#[cfg(test)]" and i + 1 < len(out) and re.match(r"\s*(pub\s+)?mod\s+\w+\s*\{", out[i + 1]):
            depth, j = 0, i + 1
            while j < len(out):
                depth += out[j].count("{") - out[j].count("}")
                out[j] = " " * len(out[j])
                j += 1
                if depth <= 0:
                    break
            i = j
        else:
            i += 1
    return out


def receiver_start(text, dot):
    """Start of the receiver of the method call whose `.` is at `dot`."""
    i = dot
    while i > 0:
        c = text[i - 1]
        if c.isalnum() or c in "_.:?":
            i -= 1
        elif c in ")]":
            close, open_ = c, "(" if c == ")" else "["
            depth, k = 0, i - 1
            while k >= 0:
                if text[k] == close:
                    depth += 1
                elif text[k] == open_:
                    depth -= 1
                    if depth == 0:
                        break
                k -= 1
            i = k
        elif c in " \n" and text[i:dot].strip() == "":
            # A call chain continued on the next line: `s\n    .fsync_dir(..)`.
            while i > 0 and text[i - 1] in " \n":
                i -= 1
        else:
            break
    return i


def call_end(text, open_paren):
    depth = 0
    for k in range(open_paren, len(text)):
        if text[k] == "(":
            depth += 1
        elif text[k] == ")":
            depth -= 1
            if depth == 0:
                return k + 1
    raise ValueError("unbalanced call")


def find_sites(root):
    """Every durability call in `root/src`: dicts with key, path, line, expr, span."""
    sites = []
    src = os.path.join(root, "src")
    for d, _, files in sorted(os.walk(src)):
        for name in sorted(files):
            # Unit test files (`tests.rs`, `*_tests.rs`) are test modules too.
            if not name.endswith(".rs") or name == "tests.rs" or name.endswith("_tests.rs"):
                continue
            full = os.path.join(d, name)
            rel = os.path.relpath(full, root)
            raw = open(full).read()
            lines = blank_test_modules([strip_comment(l) for l in raw.split("\n")])
            text = "\n".join(lines)  # same offsets as `raw`
            starts = [0]
            for l in lines:
                starts.append(starts[-1] + len(l) + 1)
            fn_at = []  # enclosing fn per line
            cur = None
            for l in lines:
                m = FN.match(l)
                if m:
                    cur = m.group(1)
                fn_at.append(cur)
            seen = {}
            for m in CALL.finditer(text):
                line_no = text.count("\n", 0, m.start())
                if DEFINITION.search(lines[line_no]):
                    continue
                dot = m.start() + m.group(0).index(".")
                begin = receiver_start(text, dot)
                end = call_end(text, text.index("(", dot))
                expr = raw[begin:end]
                key_expr = re.sub(r"\s*\n\s*", "", expr)  # a chain over lines, as one
                fn = fn_at[line_no]
                n = seen.get((fn, key_expr), 0)
                seen[(fn, key_expr)] = n + 1
                sites.append({
                    "key": (rel, fn, key_expr, n),
                    "path": rel,
                    "line": line_no + 1,
                    "expr": expr,
                    "span": (begin, end),
                })
    return sites


def readme_rows(root):
    """First cells of the README's fsync mutation table."""
    text = open(os.path.join(root, "README.md")).read()
    return {m.group(1).strip() for m in re.finditer(r"^\s*\| ([^|]+?) \| `src/", text, re.M)}


def check(root, sites):
    """Problems that make the script refuse to run: unnamed sites, stale entries."""
    problems = []
    keys = {s["key"] for s in sites}
    for s in sites:
        if s["key"] not in SITES and s["key"] not in NOT_MUTATED:
            problems.append(
                f"call site with no mutant: {s['path']}:{s['line']} in fn {s['key'][1]}: "
                f"{s['expr']!r} (occurrence {s['key'][3]}); name it in SITES (and the "
                f"README's table) or in NOT_MUTATED")
    for k in list(SITES) + list(NOT_MUTATED) + list(OVERRIDES):
        if k not in keys:
            problems.append(f"entry matches no call site (moved or renamed?): {k}")
    rows = readme_rows(root)
    for k, label in SITES.items():
        if label not in rows:
            problems.append(f"README's fsync mutation table has no row for {label!r}")
    return problems


def mutate(raw, site):
    begin, end = site["span"]
    return raw[:begin] + OVERRIDES.get(site["key"], OK) + raw[end:]


def run_mutants(args, root, rev):
    env = dict(os.environ)
    env.setdefault("CARGO_TARGET_DIR", "/tmp/segstore-mutants-target")
    scratch = tempfile.mkdtemp(prefix="segstore-mutants-")
    tree = os.path.join(scratch, "tree")
    os.makedirs(tree)
    archive = subprocess.run(["git", "archive", "HEAD"], cwd=root, check=True, capture_output=True).stdout
    subprocess.run(["tar", "-x", "-C", tree], input=archive, check=True)
    sites = find_sites(tree)
    problems = check(tree, sites)
    cmd = ["cargo", "test", "-q", "--no-fail-fast"]
    if not args.debug:
        cmd.insert(2, "--release")
    for t in TESTS:
        cmd += ["--test", t]
    rows, bad = [], 0
    try:
        if problems:
            print("\n".join(problems), file=sys.stderr)
            return 2, rows, cmd
        for site in sites:
            label = SITES.get(site["key"])
            if label is None or (args.only and args.only not in label):
                continue
            f = os.path.join(tree, site["path"])
            orig = open(f).read()
            open(f, "w").write(mutate(orig, site))
            t0 = time.time()
            r = subprocess.run(cmd, cwd=tree, env=env, capture_output=True, text=True)
            secs = time.time() - t0
            open(f, "w").write(orig)
            out = r.stdout + r.stderr
            failed = sorted(set(re.findall(r"^---- (\S+) stdout ----", out, re.M)))
            if "error[" in out or "could not compile" in out:
                verdict, detail = "did not build", out[-300:]
                bad += 1
            elif r.returncode != 0 and failed:
                verdict, detail = "caught", f"{len(failed)}: {', '.join(failed)}"
            elif r.returncode != 0:
                verdict, detail = "failed without an assertion", out[-300:]
                bad += 1
            else:
                verdict, detail = "SURVIVED", ""
                bad += 1
            rows.append((label, site["path"], verdict, detail))
            print(f"[{secs:5.0f}s] {verdict:9} {label}: {detail}", file=sys.stderr, flush=True)
            if verdict != "caught" and not args.keep_going:
                break
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    return (1 if bad else 0), rows, cmd


def list_sites(root):
    sites = find_sites(root)
    for s in sites:
        k = s["key"]
        where = f"{s['path']}:{s['line']} (fn {k[1]})"
        expr = " ".join(s["expr"].split())
        if k in SITES:
            print(f"{where}: {SITES[k]}\n    {expr}  ->  {OVERRIDES.get(k, OK)}")
        elif k in NOT_MUTATED:
            print(f"{where}: not mutated: {NOT_MUTATED[k]}\n    {expr}")
        else:
            print(f"{where}: NO MUTANT\n    {expr}")
    mutated = sum(1 for s in sites if s["key"] in SITES)
    print(f"\n{len(sites)} call sites, {mutated} mutants; tests: {', '.join(TESTS)}")
    problems = check(root, sites)
    if problems:
        print("\n".join(problems), file=sys.stderr)
        return 2
    return 0


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--list", action="store_true", help="list call sites and mutants; run nothing")
    ap.add_argument("--only", default="", help="run only sites whose label contains this")
    ap.add_argument("--keep-going", action="store_true")
    ap.add_argument("--debug", action="store_true", help="debug profile (faster builds)")
    args = ap.parse_args()
    root = subprocess.check_output(["git", "rev-parse", "--show-toplevel"], text=True).strip()
    if args.list:
        return list_sites(root)
    rev = subprocess.check_output(["git", "rev-parse", "--short", "HEAD"], cwd=root, text=True).strip()
    code, rows, cmd = run_mutants(args, root, rev)
    print(f"\nfsync mutants at {rev} (`{' '.join(cmd)}`):\n")
    print("| call removed | file | result | failing tests |")
    print("| --- | --- | --- | --- |")
    for label, path, verdict, detail in rows:
        print(f"| {label} | `{path}` | {verdict} | {detail} |")
    return code


if __name__ == "__main__":
    sys.exit(main())
