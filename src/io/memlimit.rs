//! The memory available to this process, as the kernel will enforce it: the smaller of
//! physical memory (`MemTotal` in `/proc/meminfo`) and every memory cgroup limit on
//! the way from the process's cgroup up to its hierarchy's root (cgroup v1
//! `memory.limit_in_bytes`, cgroup v2 `memory.max`). A cgroup is charged for the page
//! cache its tasks fault in, so under a limit below physical memory the page cache that
//! can hold mapped files is the limit, not the machine.
//!
//! Read from `/proc/self/mountinfo` (where each hierarchy is mounted) and
//! `/proc/self/cgroup` (the process's cgroup in each); the parsing is pure and tested
//! on text. `None` where nothing can be read (other OSes): callers then assume nothing.

use std::path::{Path, PathBuf};

/// Bytes of memory this process can fill, page cache included: see the module docs.
/// `None` where neither `/proc/meminfo` nor a cgroup limit can be read.
pub fn available_memory() -> Option<u64> {
    let total = physical_memory();
    let cgroup = match (
        std::fs::read_to_string("/proc/self/mountinfo"),
        std::fs::read_to_string("/proc/self/cgroup"),
    ) {
        (Ok(mounts), Ok(groups)) => cgroup_limit(&mounts, &groups, |p| {
            std::fs::read_to_string(p).ok()
        }),
        _ => None,
    };
    match (total, cgroup) {
        (Some(t), Some(c)) => Some(t.min(c)),
        (t, c) => t.or(c),
    }
}

/// Physical memory, in bytes: `MemTotal` of `/proc/meminfo` (`None` where it cannot be
/// read).
pub(crate) fn physical_memory() -> Option<u64> {
    std::fs::read_to_string("/proc/meminfo")
        .ok()
        .and_then(|s| mem_total(&s))
}

/// `MemTotal` of `/proc/meminfo`, in bytes.
fn mem_total(meminfo: &str) -> Option<u64> {
    let line = meminfo.lines().find(|l| l.starts_with("MemTotal:"))?;
    let mut f = line["MemTotal:".len()..].split_whitespace();
    let n: u64 = f.next()?.parse().ok()?;
    match f.next() {
        Some("kB") => n.checked_mul(1024),
        None => Some(n),
        Some(_) => None,
    }
}

/// One mounted memory cgroup hierarchy.
#[derive(Debug, PartialEq, Eq)]
struct Mount {
    /// The hierarchy's directory that is mounted (`/` unless the mount is of a subtree).
    root: String,
    /// Where it is mounted.
    point: PathBuf,
    /// cgroup v2 (`memory.max`), else v1 (`memory.limit_in_bytes`).
    v2: bool,
}

/// The memory hierarchies in `/proc/self/mountinfo`: v1 mounts whose super options
/// name the `memory` controller, and v2 mounts.
fn memory_mounts(mountinfo: &str) -> Vec<Mount> {
    mountinfo
        .lines()
        .filter_map(|line| {
            // id parent dev root point options [optional...] - fstype source superopts
            let (pre, post) = line.split_once(" - ")?;
            let pre: Vec<&str> = pre.split(' ').collect();
            let mut post = post.split(' ');
            let (fstype, _source, opts) = (post.next()?, post.next()?, post.next()?);
            let v2 = match fstype {
                "cgroup2" => true,
                "cgroup" if opts.split(',').any(|o| o == "memory") => false,
                _ => return None,
            };
            Some(Mount {
                root: unescape(pre.get(3)?),
                point: PathBuf::from(unescape(pre.get(4)?)),
                v2,
            })
        })
        .collect()
}

/// mountinfo escapes space, tab, newline and backslash as `\ooo` (octal).
fn unescape(s: &str) -> String {
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        // Three octal digits naming a byte (at most `\377`); anything else is literal.
        let byte = b
            .get(i + 1..i + 4)
            .filter(|d| d.iter().all(|c| (b'0'..=b'7').contains(c)))
            .map(|d| d.iter().fold(0u32, |n, c| n * 8 + u32::from(c - b'0')))
            .and_then(|n| u8::try_from(n).ok());
        match (b[i], byte) {
            (b'\\', Some(c)) => {
                out.push(c);
                i += 4;
            }
            (c, _) => {
                out.push(c);
                i += 1;
            }
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// The process's cgroup path in the v1 memory hierarchy and in the v2 one, from
/// `/proc/self/cgroup` (`id:controllers:path` per line; v2's line is `0::path`).
fn cgroup_paths(groups: &str) -> (Option<&str>, Option<&str>) {
    let (mut v1, mut v2) = (None, None);
    for line in groups.lines() {
        let mut f = line.splitn(3, ':');
        let (Some(id), Some(ctrls), Some(path)) = (f.next(), f.next(), f.next()) else {
            continue;
        };
        if id == "0" && ctrls.is_empty() {
            v2 = Some(path);
        } else if ctrls.split(',').any(|c| c == "memory") {
            v1 = Some(path);
        }
    }
    (v1, v2)
}

/// The directories whose limit applies: the process's cgroup's and each ancestor's, up
/// to the mount point.
fn limit_dirs(m: &Mount, path: &str) -> Vec<PathBuf> {
    // Inside a cgroup namespace the path is already relative to the mounted root.
    let rel = path
        .strip_prefix(m.root.trim_end_matches('/'))
        .unwrap_or(path)
        .trim_start_matches('/');
    let mut dirs = vec![m.point.clone()];
    let mut at = m.point.clone();
    for part in rel.split('/').filter(|p| !p.is_empty() && *p != "." && *p != "..") {
        at.push(part);
        dirs.push(at.clone());
    }
    dirs
}

/// A limit file's value: `None` for v2's `max` and for v1's "unlimited" (a page-rounded
/// `i64::MAX`, or anything from 2^62 up).
fn parse_limit(s: &str) -> Option<u64> {
    let n: u64 = s.trim().parse().ok()?;
    (n < 1 << 62).then_some(n)
}

/// The smallest memory limit over the process's cgroups and their ancestors, reading
/// each limit file with `read`.
fn cgroup_limit(
    mountinfo: &str,
    groups: &str,
    read: impl Fn(&Path) -> Option<String>,
) -> Option<u64> {
    let (v1, v2) = cgroup_paths(groups);
    memory_mounts(mountinfo)
        .iter()
        .filter_map(|m| {
            let (path, file) = match m.v2 {
                true => (v2?, "memory.max"),
                false => (v1?, "memory.limit_in_bytes"),
            };
            limit_dirs(m, path)
                .iter()
                .filter_map(|d| parse_limit(&read(&d.join(file))?))
                .min()
        })
        .min()
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashMap;

    const MOUNTS_V1: &str = "\
31 23 0:28 / /sys/fs/cgroup rw,relatime - tmpfs tmpfs rw,mode=755
32 31 0:29 / /sys/fs/cgroup/cpu rw,relatime - cgroup cgroup rw,cpu
35 31 0:32 / /sys/fs/cgroup/memory rw,relatime - cgroup cgroup rw,memory
41 31 0:38 / /sys/fs/cgroup/unified rw,relatime - cgroup2 cgroup2 rw
";
    const GROUPS_V1: &str = "4:memory:/jobs/abc\n1:cpu:/\n0::/\n";

    fn files(pairs: &[(&str, &str)]) -> impl Fn(&Path) -> Option<String> {
        let m: HashMap<PathBuf, String> = pairs
            .iter()
            .map(|(p, v)| (PathBuf::from(p), v.to_string()))
            .collect();
        move |p| m.get(p).cloned()
    }

    #[test]
    fn mem_total_is_read_in_bytes() {
        let s = "MemFree: 10 kB\nMemTotal:       24683664 kB\n";
        assert_eq!(mem_total(s), Some(24683664 * 1024));
        assert_eq!(mem_total("MemFree: 1 kB\n"), None);
        assert_eq!(mem_total("MemTotal: x kB\n"), None);
    }

    #[test]
    fn the_smallest_limit_on_the_way_to_the_root_wins() {
        let read = files(&[
            ("/sys/fs/cgroup/memory/memory.limit_in_bytes", "9223372036854771712\n"),
            ("/sys/fs/cgroup/memory/jobs/memory.limit_in_bytes", "1073741824\n"),
            ("/sys/fs/cgroup/memory/jobs/abc/memory.limit_in_bytes", "2147483648\n"),
        ]);
        assert_eq!(cgroup_limit(MOUNTS_V1, GROUPS_V1, read), Some(1 << 30));
    }

    #[test]
    fn unlimited_everywhere_is_no_limit() {
        let read = files(&[
            ("/sys/fs/cgroup/memory/memory.limit_in_bytes", "9223372036854771712\n"),
            ("/sys/fs/cgroup/memory/jobs/abc/memory.limit_in_bytes", "9223372036854771712"),
            ("/sys/fs/cgroup/unified/memory.max", "max\n"),
        ]);
        assert_eq!(cgroup_limit(MOUNTS_V1, GROUPS_V1, read), None);
    }

    #[test]
    fn cgroup_v2_reads_memory_max() {
        let mounts = "29 23 0:26 / /sys/fs/cgroup rw - cgroup2 cgroup2 rw,nsdelegate\n";
        let read = files(&[
            ("/sys/fs/cgroup/user.slice/memory.max", "max\n"),
            ("/sys/fs/cgroup/user.slice/job.scope/memory.max", "536870912\n"),
        ]);
        assert_eq!(
            cgroup_limit(mounts, "0::/user.slice/job.scope\n", read),
            Some(512 << 20)
        );
    }

    #[test]
    fn a_mounted_subtree_and_an_escaped_mount_point_are_followed() {
        let mounts = "35 31 0:32 /docker/c1 /sys/fs/cgroup/mem\\040ory ro - cgroup cgroup rw,memory\n";
        let read = files(&[("/sys/fs/cgroup/mem ory/memory.limit_in_bytes", "4096")]);
        assert_eq!(cgroup_limit(mounts, "9:memory:/docker/c1\n", &read), Some(4096));
        // Inside a cgroup namespace the path is relative to the mounted root already.
        assert_eq!(cgroup_limit(mounts, "9:memory:/\n", &read), Some(4096));
    }

    #[test]
    fn escapes_past_a_byte_stay_literal() {
        assert_eq!(unescape("a\\040b"), "a b");
        assert_eq!(unescape("a\\777b"), "a\\777b");
        assert_eq!(unescape("tail\\04"), "tail\\04");
    }

    #[test]
    fn malformed_text_gives_no_limit_and_no_panic() {
        for (mounts, groups) in [
            ("", ""),
            ("garbage", "garbage"),
            ("1 2 3 - cgroup", "4:memory"),
            ("1 - cgroup cgroup rw,memory", "4:memory:/a"),
        ] {
            assert_eq!(cgroup_limit(mounts, groups, |_| Some("12".into())), None);
        }
        assert_eq!(parse_limit("-1"), None);
        assert_eq!(parse_limit("max"), None);
    }

    #[test]
    fn this_machine_reports_some_memory() {
        if cfg!(target_os = "linux") {
            let m = available_memory().expect("Linux has /proc/meminfo");
            assert!(m > 0);
        }
    }
}
