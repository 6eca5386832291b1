//! Random gets with the page cache capped below the data size: the measuring child runs
//! in a memory cgroup (v1, `/sys/fs/cgroup/memory`) whose `memory.limit_in_bytes` is
//! `--cap-mib`. A cgroup is charged for the page cache its tasks fault in, so the kernel
//! evicts the child's file pages to stay under the limit. Pages already cached are
//! charged to whoever read them first and would not count, so before each child the
//! parent writes back and drops the system's files from the page cache (`fsync`, then
//! `posix_fadvise(DONTNEED)` per file). One new cgroup per system, removed after it.
//! Where a cgroup cannot be made (no v1 memory controller, not root), the reason is
//! printed and the measurement skipped.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Instant;

use super::generators::Rng;
use super::kv;
use super::report::{self, CapResult, Capped};
use super::workload::{json_values, key, VALUE_LEN};
use super::Args;

const CGROUP_ROOT: &str = "/sys/fs/cgroup/memory";

/// Make a memory cgroup limited to `bytes`; `Err` says why it could not be made.
fn make_cgroup(name: &str, bytes: u64) -> Result<PathBuf, String> {
    let root = Path::new(CGROUP_ROOT);
    if !root.join("memory.limit_in_bytes").exists() {
        return Err(format!("no cgroup v1 memory controller at {CGROUP_ROOT}"));
    }
    let cg = root.join(name);
    std::fs::create_dir(&cg).map_err(|e| format!("cannot create {}: {e}", cg.display()))?;
    if let Err(e) = std::fs::write(cg.join("memory.limit_in_bytes"), bytes.to_string()) {
        let _ = std::fs::remove_dir(&cg);
        return Err(format!(
            "cannot set memory.limit_in_bytes of {}: {e}",
            cg.display()
        ));
    }
    Ok(cg)
}

/// Write back and drop every file under `dir` from the page cache.
fn drop_cache(dir: &Path) {
    use std::os::fd::AsRawFd;
    for e in std::fs::read_dir(dir).unwrap() {
        let p = e.unwrap().path();
        if p.is_dir() {
            drop_cache(&p);
        } else if let Ok(f) = std::fs::File::open(&p) {
            let _ = f.sync_all();
            // SAFETY: `f` is an open file descriptor for the duration of the call;
            // posix_fadvise only advises the kernel about its cached pages.
            unsafe {
                libc::posix_fadvise(f.as_raw_fd(), 0, 0, libc::POSIX_FADV_DONTNEED);
            }
        }
    }
}

fn read_u64(p: &Path) -> u64 {
    std::fs::read_to_string(p)
        .ok()
        .and_then(|s| s.trim().parse().ok())
        .unwrap_or(0)
}

/// Run one child per system in its own capped cgroup and print the table.
pub fn run_all(root: &Path, ids: &[&str], mib: u64, a: &Args) {
    let mut rows = Vec::new();
    for id in ids {
        let name = format!("segstore-peers-{}-{id}", std::process::id());
        let cg = match make_cgroup(&name, mib << 20) {
            Ok(cg) => cg,
            Err(reason) => {
                println!();
                println!("capped gets skipped: {reason}");
                return;
            }
        };
        let d = kv::dir(root, id);
        drop_cache(&d);
        let out = Command::new(std::env::current_exe().unwrap())
            .arg("--ycsb")
            .args(["--cap-child", id])
            .arg(&cg)
            .arg("--dir")
            .arg(root)
            .args(["--keys", &a.keys.to_string()])
            .args(["--cap-mib", &mib.to_string()])
            .args(["--cap-secs", &a.cap_secs.to_string()])
            .args(["--values", if json_values() { "json" } else { "random" }])
            .output()
            .unwrap();
        let peak = read_u64(&cg.join("memory.max_usage_in_bytes"));
        let oom = read_u64(&cg.join("memory.failcnt")) > 0
            && std::fs::read_to_string(cg.join("memory.oom_control")).is_ok_and(|s| {
                s.lines()
                    .any(|l| l.starts_with("oom_kill ") && l != "oom_kill 0")
            });
        let r = parse_child(&String::from_utf8_lossy(&out.stdout), peak).ok_or_else(|| {
            let err = String::from_utf8_lossy(&out.stderr);
            let why = if oom {
                " (killed by the cgroup's OOM killer)"
            } else {
                ""
            };
            format!(
                "child {}{why} {}",
                out.status,
                err.lines().last().unwrap_or("")
            )
        });
        // The child has exited; its cgroup is empty and can go (its page cache is
        // charged to the parent cgroup from then on).
        if let Err(e) = std::fs::remove_dir(&cg) {
            eprintln!("could not remove {}: {e}", cg.display());
        }
        drop_cache(&d);
        rows.push(Capped {
            id,
            r,
            data_bytes: crate::disk_usage(&d).1,
        });
    }
    report::capped(mib, &rows);
}

fn parse_child(out: &str, peak: u64) -> Option<CapResult> {
    let line = out.lines().find_map(|l| l.strip_prefix("CAPPED "))?;
    let v: Vec<f64> = line
        .split_whitespace()
        .filter_map(|x| x.parse().ok())
        .collect();
    let [gets, secs, p99_ns, read, majflt] = v[..] else {
        return None;
    };
    Some(CapResult {
        gets_per_sec: gets / secs,
        p99_us: p99_ns / 1e3,
        gets: gets as u64,
        read_per_get: read / gets,
        majflt_per_get: majflt / gets,
        peak,
    })
}

fn read_bytes() -> u64 {
    std::fs::read_to_string("/proc/self/io")
        .ok()
        .and_then(|s| {
            s.lines()
                .find_map(|l| l.strip_prefix("read_bytes:"))
                .and_then(|v| v.trim().parse().ok())
        })
        .unwrap_or(0)
}

fn major_faults() -> u64 {
    // SAFETY: getrusage writes one `rusage` into the zeroed struct we own.
    unsafe {
        let mut u: libc::rusage = std::mem::zeroed();
        libc::getrusage(libc::RUSAGE_SELF, &mut u);
        u.ru_majflt as u64
    }
}

/// The child: join the cgroup, open the system (caches of its own at a quarter of the
/// cap, so they leave room for the page cache their files need),
/// warm for a third of `cap_secs`, then time uniform random gets for `cap_secs`.
pub fn child(root: &Path, id: &str, cg: &Path, a: &Args) {
    if let Err(e) = std::fs::write(cg.join("cgroup.procs"), std::process::id().to_string()) {
        eprintln!("cannot join {}: {e}", cg.display());
        std::process::exit(2);
    }
    let cap = a.cap_mib.expect("--cap-mib") << 20;
    let kv = kv::open(id, &kv::dir(root, id), (cap / 4) as usize);
    let mut rng = Rng::new(77);
    let get = |rng: &mut Rng| {
        let n = rng.next_u64() % a.keys;
        let t = Instant::now();
        let len = kv.read(&key(n));
        let ns = t.elapsed().as_nanos() as u64;
        assert_eq!(len, VALUE_LEN, "item {n} missing");
        ns
    };
    let warm = Instant::now();
    while warm.elapsed().as_secs_f64() < a.cap_secs / 3.0 {
        get(&mut rng);
    }
    let mut h = hdrhistogram::Histogram::<u64>::new_with_bounds(1, 60_000_000_000, 3).unwrap();
    let (read0, flt0) = (read_bytes(), major_faults());
    let t = Instant::now();
    let mut gets = 0u64;
    while t.elapsed().as_secs_f64() < a.cap_secs {
        h.saturating_record(get(&mut rng));
        gets += 1;
    }
    let secs = t.elapsed().as_secs_f64();
    let (read, flt) = (read_bytes() - read0, major_faults() - flt0);
    println!(
        "CAPPED {gets} {secs} {} {read} {flt}",
        h.value_at_quantile(0.99)
    );
    std::io::stdout().flush().unwrap();
    kv.close();
}
