#!/usr/bin/env python3
"""Remove each fsync / directory fsync call site in turn and show that a test fails.

For every durability call the engine makes (file fsync, directory fsync), this copies
the committed tree (git archive HEAD) to a scratch directory, deletes that one call,
runs the power-loss crash-point tests (tests/power_loss.rs) and records whether they
failed ("caught") or passed ("SURVIVED": a call no test depends on). Prints a Markdown
table; exits 1 if any mutant survived or a snippet no longer matches the source.

    scripts/fsync_mutants.py [--only SUBSTRING] [--keep-going] [--debug]

Uses CARGO_TARGET_DIR (default /tmp/segstore-mutants-target) so rebuilds are
incremental. Takes a few minutes per mutant on a 2-core machine.
"""
import argparse
import os
import shutil
import subprocess
import sys
import tempfile
import time

# (label, file, snippet that must occur exactly once, replacement)
MUTANTS = [
    ("segment data/index fsync", "src/segment/writer.rs",
     "w.get_ref().sync_all()", "Ok(())"),
    ("segment meta fsync", "src/segment/writer.rs",
     "mf.sync_all()?;", ""),
    ("segment: dir fsync before the meta rename", "src/segment/writer.rs",
     "self.fs.fsync_dir(&self.dir)\n            } else {", "Ok(())\n            } else {"),
    ("segment: dir fsync after publishing", "src/segment/writer.rs",
     "self.fs.fsync_dir(&self.dir)?;\n        self.done = true;", "self.done = true;"),
    ("write_atomic: temp file fsync (manifests, positions, journal)", "src/io/fs.rs",
     "let r = f.append(bytes).and_then(|()| f.sync_all());", "let r = f.append(bytes);"),
    ("publish: dir fsync after rename (manifests, positions, journal)", "src/io/fs.rs",
     "self.fsync_dir(dest.parent().unwrap_or(Path::new(\".\")))", "Ok(())"),
    ("create_dir_all: parent dir fsync", "src/io/fs.rs",
     "Some(p) => self.fsync_dir(p),", "Some(_) => Ok(()),"),
    ("copy_durable fsync (hard-link fallback)", "src/io/fs.rs",
     "f.append(&bytes)?;\n        f.sync_all()", "f.append(&bytes)"),
    ("snapshot: snapshots dir fsync after rename", "src/snapshot/mod.rs",
     "fs.fsync_dir(&root)\n    })();", "Ok(())\n    })();"),
    ("commit log: dir fsync after creating a file", "src/table/commitlog/mod.rs",
     "    // be durable before any record in the file is acknowledged.\n    fs.fsync_dir(dir)?;",
     "    // be durable before any record in the file is acknowledged."),
    ("commit log: append fsync (batch, group, periodic, close)", "src/table/commitlog/mod.rs",
     "file.sync_data()?;", ""),
    ("commit log sync before a checkpoint's positions", "src/table/tables.rs",
     "            self.log.sync()?;\n            if let Err(e) = next.store(&self.log_dir, &self.fs) {",
     "            if let Err(e) = next.store(&self.log_dir, &self.fs) {"),
    ("commit log sync before a flush publishes its segment (periodic)", "src/table/lsm.rs",
     "                match self.ctx.log.sync() {\n                    Ok(()) | Err(Error::Poisoned(_)) => {}\n                    Err(e) => return Err(e),\n                }",
     ""),
    ("commit log sync before a drop names its records (periodic)", "src/table/tables.rs",
     "        if let Err(e) = self.ctx.log.sync() {\n            drop(pos);",
     "        if let Err(e) = Ok::<(), Error>(()) {\n            drop(pos);"),
    ("deleter: dir fsync before the journal forgets an unlink", "src/lifecycle/deleter.rs",
     "if let Err(e) = self.inner.fs.fsync_dir(d) {", "if let Err(e) = Ok::<(), Error>(()) {"),
]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--only", default="")
    ap.add_argument("--keep-going", action="store_true")
    ap.add_argument("--debug", action="store_true", help="debug profile (faster builds)")
    args = ap.parse_args()
    root = subprocess.check_output(["git", "rev-parse", "--show-toplevel"], text=True).strip()
    rev = subprocess.check_output(["git", "rev-parse", "--short", "HEAD"], cwd=root, text=True).strip()
    env = dict(os.environ)
    env.setdefault("CARGO_TARGET_DIR", "/tmp/segstore-mutants-target")
    scratch = tempfile.mkdtemp(prefix="segstore-mutants-")
    tree = os.path.join(scratch, "tree")
    os.makedirs(tree)
    archive = subprocess.run(["git", "archive", "HEAD"], cwd=root, check=True, capture_output=True).stdout
    subprocess.run(["tar", "-x", "-C", tree], input=archive, check=True)
    cmd = ["cargo", "test", "-q", "--test", "power_loss"]
    if not args.debug:
        cmd.insert(2, "--release")
    rows, bad = [], 0
    try:
        for label, path, snippet, repl in MUTANTS:
            if args.only and args.only not in label:
                continue
            f = os.path.join(tree, path)
            orig = open(f).read()
            n = orig.count(snippet)
            if n != 1:
                rows.append((label, path, f"snippet found {n} times", ""))
                bad += 1
                continue
            open(f, "w").write(orig.replace(snippet, repl))
            t0 = time.time()
            r = subprocess.run(cmd, cwd=tree, env=env, capture_output=True, text=True)
            secs = time.time() - t0
            open(f, "w").write(orig)
            out = r.stdout + r.stderr
            if "error[" in out or "could not compile" in out:
                verdict, detail = "did not build", out[-300:]
                bad += 1
            elif r.returncode != 0 and "panicked" in out:
                failed = [l.split()[0] for l in out.splitlines() if l.startswith("    ") and "::" not in l and l.strip() and " " not in l.strip()]
                first = next((l for l in out.splitlines() if "power lost at" in l or "panicked" in l), "")
                names = sorted(set(failed))
                verdict = "caught"
                detail = f"{len(names)}: {', '.join(names)}" if names else first[:200]
            elif r.returncode != 0:
                verdict, detail = "failed without an assertion", out[-300:]
                bad += 1
            else:
                verdict, detail = "SURVIVED", ""
                bad += 1
            rows.append((label, path, verdict, detail))
            print(f"[{secs:5.0f}s] {verdict:9} {label}: {detail}", file=sys.stderr, flush=True)
            if verdict != "caught" and not args.keep_going:
                break
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    print(f"\nfsync mutants at {rev} (`{' '.join(cmd)}`):\n")
    print("| call removed | file | result | failing tests |")
    print("| --- | --- | --- | --- |")
    for label, path, verdict, detail in rows:
        print(f"| {label} | `{path}` | {verdict} | {detail} |")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
