//! Command line: clap parses the flags; [`Settings::from_cli`] checks them and parses the
//! cassandra-stress style words (`read`, `n=200000`, `ratio(read=3,write=1)`). Every
//! mistake becomes a message that `main` prints with the usage, exiting with code 2.

use std::fmt;
use std::path::PathBuf;
use std::time::Duration;

use clap::Parser;
use segstore::{CommitLogSync, DiskAccessMode};

use crate::dist::{digits_for, KeyDist};
use crate::target::TargetKind;

const EXAMPLES: &str = "\
Examples:
  stress write n=100000 --duration 5s
  stress write n=100000 --threads 1,4,16 --duration 3s --sync group:100us
  stress read n=200000 --access mmap,standard --threads 1,2 --duration 3s
  stress 'mixed ratio(read=3,write=1)' --dist zipf --max-threads 36 --csv out.csv --plot out.svg

Quote ratio(...) in a shell: parentheses are shell syntax.";

/// Load generator for segstore in the spirit of cassandra-stress.
#[derive(Debug, Parser)]
#[command(name = "stress", after_help = EXAMPLES)]
pub struct Cli {
    /// Workload and its options: `write`, `read` or `mixed`, then optionally `n=KEYS`
    /// and, for mixed, `ratio(read=R,write=W)`
    #[arg(value_name = "WORKLOAD", required = true, num_args = 1..)]
    pub words: Vec<String>,

    /// Number of distinct keys (same as n=; suffixes k, m, b allowed) [default: 100000]
    #[arg(long, value_name = "N")]
    pub keys: Option<String>,

    /// Key size in bytes (zero-padded decimal key numbers)
    #[arg(long, default_value_t = 10, value_name = "BYTES")]
    pub key_size: usize,

    /// Value size in bytes
    #[arg(long, default_value_t = 100, value_name = "BYTES")]
    pub value_size: usize,

    /// Key choice: `uniform`, `zipf` (exponent 0.99) or `zipf(S)`
    #[arg(long, default_value = "uniform", value_name = "DIST")]
    pub dist: String,

    /// One or several disk_access_modes, comma-separated; the sweep runs once per mode
    /// on the same data
    #[arg(
        long,
        default_value = "auto",
        value_delimiter = ',',
        value_name = "MODES"
    )]
    pub access: Vec<String>,

    /// Commit log sync mode of the table target: `periodic` or `periodic:PERIOD`
    /// (acknowledge at once, fsync every PERIOD, default 10000ms), `batch` (fsync before
    /// acknowledging), `group` or `group:WINDOW` (writers share the fsync that closes a
    /// window, default 1ms; e.g. group:100us) [default: periodic]
    #[arg(long, value_name = "MODE", value_parser = parse_sync)]
    pub sync: Option<CommitLogSync>,

    /// What to load: `table` (the LSM table: commit log, memtables, flushes,
    /// compaction) or `segment` (Store + SegmentSet with the tool's own write buffer)
    #[arg(long, value_enum, default_value_t = TargetKind::Table)]
    pub target: TargetKind,

    /// Fixed thread counts, comma-separated (e.g. 1,2,4); default is a sweep
    #[arg(long, value_delimiter = ',', value_name = "N,...", conflicts_with_all = ["min_threads", "max_threads"])]
    pub threads: Option<Vec<usize>>,

    /// First thread count of the sweep
    #[arg(long, default_value_t = 4, value_name = "N")]
    pub min_threads: usize,

    /// Last thread count the sweep may reach (4, 8, 16, 24, 36, 54, 81, ...)
    #[arg(long, default_value_t = 1000, value_name = "N")]
    pub max_threads: usize,

    /// Fixed-rate mode: steps at these total rates (e.g. 20000/s or 20k/s; a plain
    /// number is per second), comma-separated, each run by one --threads count (default
    /// 4); latencies are measured from each operation's intended start (corrected for
    /// coordinated omission). Default: a closed loop, each thread starting its next
    /// operation when the last ends
    #[arg(long, value_delimiter = ',', value_name = "N/s,...", value_parser = parse_rate, conflicts_with_all = ["min_threads", "max_threads"])]
    pub rate: Option<Vec<f64>>,

    /// Length of each step, e.g. 10s, 500ms, 2m [default: 10s]
    #[arg(long, value_name = "TIME", conflicts_with = "ops")]
    pub duration: Option<String>,

    /// Operations per step instead of a duration (suffixes k, m, b allowed)
    #[arg(long, value_name = "N")]
    pub ops: Option<String>,

    /// Write the result rows to this CSV file
    #[arg(long, value_name = "FILE")]
    pub csv: Option<PathBuf>,

    /// Draw op/s and p99 against threads into this SVG file (with --rate: p99 against
    /// the achieved op/s)
    #[arg(long, value_name = "FILE.svg")]
    pub plot: Option<PathBuf>,

    /// Store directory [default: a temporary directory, removed at exit]
    #[arg(long, value_name = "DIR")]
    pub dir: Option<PathBuf>,

    /// Segment target only: flush buffered writes to a new segment every N writes
    #[arg(long, default_value_t = 10_000, value_name = "N")]
    pub flush_every: usize,

    /// Segment target only: merge all segments into one when there are K of them
    #[arg(long, default_value_t = 8, value_name = "K")]
    pub compact_every: usize,

    /// Seed of the key and value generators
    #[arg(long, default_value_t = 1)]
    pub seed: u64,
}

/// Parse `--sync` with the store's own syntax ([`CommitLogSync`]'s `FromStr`).
pub fn parse_sync(s: &str) -> Result<CommitLogSync, String> {
    s.parse().map_err(|e: segstore::Error| e.to_string())
}

/// The operation mix.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Workload {
    /// Writes only.
    Write,
    /// Reads only, of keys loaded first.
    Read,
    /// Reads and writes in this ratio.
    Mixed(Ratio),
}

impl Workload {
    /// Whether the keys must be loaded before the steps.
    pub fn needs_load(self) -> bool {
        !matches!(self, Workload::Write)
    }

    /// (reads, writes) weights.
    pub fn weights(self) -> (u64, u64) {
        match self {
            Workload::Write => (0, 1),
            Workload::Read => (1, 0),
            Workload::Mixed(r) => (r.read, r.write),
        }
    }
}

impl fmt::Display for Workload {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Workload::Write => f.write_str("write"),
            Workload::Read => f.write_str("read"),
            Workload::Mixed(r) => write!(f, "mixed ratio(read={},write={})", r.read, r.write),
        }
    }
}

/// `ratio(read=R,write=W)` weights.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Ratio {
    /// Read weight.
    pub read: u64,
    /// Write weight.
    pub write: u64,
}

impl Default for Ratio {
    /// cassandra-stress's default mix: one read per write.
    fn default() -> Self {
        Ratio { read: 1, write: 1 }
    }
}

/// Parse `ratio(read=R,write=W)`: either order, either part may be left out (weight 0),
/// weights are non-negative integers, at least one positive.
pub fn parse_ratio(s: &str) -> Result<Ratio, String> {
    let bad = |why: &str| Err(format!("bad {s:?}: {why} (expected ratio(read=R,write=W))"));
    let Some(body) = s
        .trim()
        .strip_prefix("ratio(")
        .and_then(|b| b.strip_suffix(')'))
    else {
        return bad("not of the form ratio(...)");
    };
    let (mut read, mut write) = (None, None);
    for part in body.split(',') {
        let Some((name, value)) = part.split_once('=') else {
            return bad(&format!("{:?} is not name=weight", part.trim()));
        };
        let slot = match name.trim() {
            "read" => &mut read,
            "write" => &mut write,
            other => return bad(&format!("unknown operation {other:?}; use read and write")),
        };
        if slot.is_some() {
            return bad(&format!("{} given twice", name.trim()));
        }
        let Ok(v) = value.trim().parse::<u64>() else {
            return bad(&format!("weight {:?} is not a whole number", value.trim()));
        };
        *slot = Some(v);
    }
    let r = Ratio {
        read: read.unwrap_or(0),
        write: write.unwrap_or(0),
    };
    if r.read.checked_add(r.write).is_none_or(|t| t == 0) {
        return bad("weights must add up to between 1 and 2^64 - 1");
    }
    Ok(r)
}

/// Parse a count: digits with an optional k, m or b suffix (x1000, x1e6, x1e9).
pub fn parse_count(s: &str) -> Result<u64, String> {
    let t = s.trim().to_ascii_lowercase();
    let (digits, mult) = match t.as_bytes().last() {
        Some(b'k') => (&t[..t.len() - 1], 1_000),
        Some(b'm') => (&t[..t.len() - 1], 1_000_000),
        Some(b'b') => (&t[..t.len() - 1], 1_000_000_000),
        _ => (&t[..], 1),
    };
    digits
        .parse::<u64>()
        .ok()
        .and_then(|n| n.checked_mul(mult))
        .ok_or_else(|| format!("{s:?} is not a count (e.g. 200000, 200k, 1m)"))
}

/// Highest `--rate` accepted, op/s.
pub const MAX_RATE: f64 = 1e9;

/// Parse a rate: `N/s` or a plain `N` (per second), N a positive number with an
/// optional k or m suffix (x1000, x1e6): `20000/s`, `20k/s`, `1.5m`.
pub fn parse_rate(s: &str) -> Result<f64, String> {
    let t = s.trim().to_ascii_lowercase();
    let body = t.strip_suffix("/s").unwrap_or(&t);
    let (num, mult) = match body.as_bytes().last() {
        Some(b'k') => (&body[..body.len() - 1], 1e3),
        Some(b'm') => (&body[..body.len() - 1], 1e6),
        _ => (body, 1.0),
    };
    let bad = || format!("{s:?} is not a rate: use N/s with N > 0, e.g. 20000/s, 20k/s or 20000");
    if num.is_empty() || !num.bytes().all(|b| b.is_ascii_digit() || b == b'.') {
        return Err(bad());
    }
    match num.parse::<f64>().map(|v| v * mult) {
        Ok(v) if v > 0.0 && v <= MAX_RATE => Ok(v),
        Ok(v) if v > MAX_RATE => Err(format!("{s:?}: over the limit of {MAX_RATE:e} op/s")),
        _ => Err(bad()),
    }
}

/// Parse a duration: a number with unit ms, s, m or h (a bare number is seconds).
pub fn parse_duration(s: &str) -> Result<Duration, String> {
    let t = s.trim();
    let split = t
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(t.len());
    let (num, unit) = t.split_at(split);
    let secs = match unit {
        "ms" => 0.001,
        "" | "s" => 1.0,
        "m" => 60.0,
        "h" => 3600.0,
        _ => return Err(format!("{s:?}: unknown unit {unit:?} (use ms, s, m or h)")),
    };
    match num.parse::<f64>() {
        Ok(v) if v > 0.0 && (v * secs) < 1e7 => Ok(Duration::from_secs_f64(v * secs)),
        _ => Err(format!(
            "{s:?} is not a positive duration (e.g. 10s, 500ms, 2m)"
        )),
    }
}

fn parse_dist(s: &str) -> Result<KeyDist, String> {
    let t = s.trim();
    if t == "uniform" {
        return Ok(KeyDist::Uniform);
    }
    if t == "zipf" {
        return Ok(KeyDist::Zipf(0.99));
    }
    let exp = t.strip_prefix("zipf(").and_then(|r| r.strip_suffix(')'));
    match exp.map(|e| e.trim().parse::<f64>()) {
        Some(Ok(e)) if e > 0.0 && e <= 10.0 => Ok(KeyDist::Zipf(e)),
        _ => Err(format!(
            "--dist {s:?}: use uniform, zipf or zipf(S) with 0 < S <= 10"
        )),
    }
}

/// When a step ends.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StepLimit {
    /// After this long.
    Time(Duration),
    /// After this many operations (all threads together).
    Ops(u64),
}

/// Which thread counts run.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Threads {
    /// Exactly these, in order.
    Fixed(Vec<usize>),
    /// cassandra-stress's sweep from `min` up to `max`, stopping when op/s stops growing.
    Sweep {
        /// First thread count.
        min: usize,
        /// Upper bound.
        max: usize,
    },
}

/// Checked settings.
#[derive(Debug, Clone)]
pub struct Settings {
    /// Operation mix.
    pub workload: Workload,
    /// Distinct keys.
    pub keys: u64,
    /// Key size, bytes.
    pub key_size: usize,
    /// Value size, bytes.
    pub value_size: usize,
    /// Key choice.
    pub dist: KeyDist,
    /// Access modes, in the order given (no repeats).
    pub modes: Vec<DiskAccessMode>,
    /// Commit log sync mode, if given.
    pub sync: Option<CommitLogSync>,
    /// What is loaded.
    pub target: TargetKind,
    /// Thread counts.
    pub threads: Threads,
    /// Fixed-rate mode: the total op/s of each step, in order (empty: closed loop).
    pub rates: Vec<f64>,
    /// Step length.
    pub limit: StepLimit,
    /// CSV output.
    pub csv: Option<PathBuf>,
    /// SVG output.
    pub plot: Option<PathBuf>,
    /// Store directory (None: a temporary one).
    pub dir: Option<PathBuf>,
    /// Segment target: writes per flush.
    pub flush_every: usize,
    /// Segment target: segments that trigger a full merge.
    pub compact_every: usize,
    /// Generator seed.
    pub seed: u64,
}

/// Most threads a step may use.
pub const MAX_THREADS: usize = 4096;
/// Client threads of a fixed-rate step when `--threads` is not given.
pub const DEFAULT_RATE_THREADS: usize = 4;
/// Largest value accepted (the buffer holds values in memory).
pub const MAX_VALUE_SIZE: usize = 16 << 20;

impl Settings {
    /// Check `cli` and parse its words.
    pub fn from_cli(cli: Cli) -> Result<Settings, String> {
        // Words may arrive quoted together: 'mixed ratio(read=3,write=1)'.
        let mut words = cli.words.iter().flat_map(|w| w.split_whitespace());
        let kind = words.next().unwrap_or_default();
        let (mut keys, mut ratio) = (None, None);
        for w in words {
            if let Some(n) = w.strip_prefix("n=") {
                if keys.replace(parse_count(n)?).is_some() {
                    return Err("n= given twice".into());
                }
            } else if w.starts_with("ratio") {
                if ratio.replace(parse_ratio(w)?).is_some() {
                    return Err("ratio(...) given twice".into());
                }
            } else {
                return Err(format!(
                    "unexpected {w:?} after the workload (expected n=KEYS or ratio(read=R,write=W))"
                ));
            }
        }
        let workload = match (kind, ratio) {
            ("write", None) => Workload::Write,
            ("read", None) => Workload::Read,
            ("mixed", r) => Workload::Mixed(r.unwrap_or_default()),
            ("write" | "read", Some(_)) => {
                return Err(format!(
                    "ratio(...) applies only to the mixed workload, not {kind}"
                ))
            }
            (other, _) => {
                let hint = if other.starts_with("mixed") {
                    " (put a space before ratio(...) and quote it)"
                } else {
                    ""
                };
                return Err(format!(
                    "unknown workload {other:?}: use write, read or mixed{hint}"
                ));
            }
        };
        let keys = match (keys, &cli.keys) {
            (Some(_), Some(_)) => return Err("give the key count once: n= or --keys".into()),
            (Some(n), None) => n,
            (None, Some(k)) => parse_count(k)?,
            (None, None) => 100_000,
        };
        if keys == 0 {
            return Err("the key count must be at least 1".into());
        }
        let max_key = segstore::format::MAX_KEY_LEN;
        if cli.key_size < digits_for(keys) || cli.key_size > max_key {
            return Err(format!(
                "--key-size {} cannot hold {keys} keys: use {} to {max_key} bytes",
                cli.key_size,
                digits_for(keys)
            ));
        }
        if cli.value_size > MAX_VALUE_SIZE {
            return Err(format!(
                "--value-size {} is over the limit of {MAX_VALUE_SIZE} bytes",
                cli.value_size
            ));
        }
        let mut modes = Vec::new();
        for m in &cli.access {
            let mode: DiskAccessMode = m.parse().map_err(|e| format!("--access: {e}"))?;
            if modes.contains(&mode) {
                return Err(format!("--access lists {mode} twice"));
            }
            modes.push(mode);
        }
        let rates = cli.rate.unwrap_or_default();
        let threads = match cli.threads {
            Some(list) if !rates.is_empty() && list.len() != 1 => {
                return Err(format!(
                    "--rate runs every rate at one thread count: give --threads N once, not {}",
                    list.len()
                ))
            }
            None if !rates.is_empty() => Threads::Fixed(vec![DEFAULT_RATE_THREADS]),
            Some(list) => {
                if list.iter().any(|&t| t == 0 || t > MAX_THREADS) {
                    return Err(format!("--threads: each count must be 1 to {MAX_THREADS}"));
                }
                Threads::Fixed(list)
            }
            None => {
                let (min, max) = (cli.min_threads, cli.max_threads);
                if min == 0 || max > MAX_THREADS || min > max {
                    return Err(format!(
                        "--min-threads {min} and --max-threads {max}: need 1 <= min <= max <= {MAX_THREADS}"
                    ));
                }
                Threads::Sweep { min, max }
            }
        };
        let limit = match (&cli.duration, &cli.ops) {
            (Some(d), None) => {
                StepLimit::Time(parse_duration(d).map_err(|e| format!("--duration {e}"))?)
            }
            (None, Some(n)) => match parse_count(n).map_err(|e| format!("--ops {e}"))? {
                0 => return Err("--ops must be at least 1".into()),
                n => StepLimit::Ops(n),
            },
            (None, None) => StepLimit::Time(Duration::from_secs(10)),
            (Some(_), Some(_)) => return Err("give --duration or --ops, not both".into()),
        };
        if cli.flush_every == 0 {
            return Err("--flush-every must be at least 1".into());
        }
        if cli.compact_every < 2 {
            return Err("--compact-every must be at least 2".into());
        }
        for (flag, p) in [("--csv", &cli.csv), ("--plot", &cli.plot)] {
            if p.as_ref().is_some_and(|p| p.as_os_str().is_empty()) {
                return Err(format!("{flag} needs a file name"));
            }
        }
        Ok(Settings {
            workload,
            keys,
            key_size: cli.key_size,
            value_size: cli.value_size,
            dist: parse_dist(&cli.dist)?,
            modes,
            sync: cli.sync,
            target: cli.target,
            threads,
            rates,
            limit,
            csv: cli.csv,
            plot: cli.plot,
            dir: cli.dir,
            flush_every: cli.flush_every,
            compact_every: cli.compact_every,
            seed: cli.seed,
        })
    }

    /// The largest thread count any step may use (sizes the table's id column).
    pub fn max_threads(&self) -> usize {
        match &self.threads {
            Threads::Fixed(v) => v.iter().copied().max().unwrap_or(1),
            Threads::Sweep { max, .. } => *max,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn settings(args: &[&str]) -> Result<Settings, String> {
        let cli = Cli::try_parse_from(std::iter::once("stress").chain(args.iter().copied()))
            .map_err(|e| e.to_string())?;
        Settings::from_cli(cli)
    }

    #[test]
    fn ratio_parses_the_cassandra_stress_syntax() {
        let r = |read, write| Ratio { read, write };
        assert_eq!(parse_ratio("ratio(read=3,write=1)"), Ok(r(3, 1)));
        assert_eq!(parse_ratio("ratio(write=1,read=3)"), Ok(r(3, 1)));
        assert_eq!(parse_ratio("ratio( read = 2 , write = 5 )"), Ok(r(2, 5)));
        assert_eq!(parse_ratio("ratio(read=1)"), Ok(r(1, 0)));
        assert_eq!(parse_ratio("ratio(write=4)"), Ok(r(0, 4)));
        assert_eq!(parse_ratio("ratio(read=0,write=9)"), Ok(r(0, 9)));
    }

    #[test]
    fn bad_ratios_say_what_is_wrong() {
        for (bad, why) in [
            ("ratio(read=3,write=1", "not of the form"),
            ("ratio[read=3]", "not of the form"),
            ("read=3,write=1", "not of the form"),
            ("ratio()", "is not name=weight"),
            ("ratio(read=3,)", "is not name=weight"),
            ("ratio(read=3;write=1)", "is not a whole number"),
            ("ratio(read=x,write=1)", "is not a whole number"),
            ("ratio(read=-1,write=1)", "is not a whole number"),
            ("ratio(read=1.5,write=1)", "is not a whole number"),
            ("ratio(read=1,scan=1)", "unknown operation \"scan\""),
            ("ratio(read=1,read=2)", "read given twice"),
            ("ratio(read=0,write=0)", "add up to"),
            ("ratio(read=18446744073709551615,write=1)", "add up to"),
        ] {
            let e = parse_ratio(bad).unwrap_err();
            assert!(e.contains(why), "{bad}: {e}");
            assert!(e.contains("ratio(read=R,write=W)"), "{bad}: {e}");
        }
    }

    #[test]
    fn workload_words() {
        let s = settings(&["mixed", "ratio(read=3,write=1)", "n=200k"]).unwrap();
        assert_eq!(s.workload, Workload::Mixed(Ratio { read: 3, write: 1 }));
        assert_eq!(s.keys, 200_000);
        let s = settings(&["mixed ratio(write=1,read=4)  n=10"]).unwrap();
        assert_eq!(s.workload, Workload::Mixed(Ratio { read: 4, write: 1 }));
        assert_eq!(s.keys, 10);
        let s = settings(&["mixed"]).unwrap();
        assert_eq!(s.workload, Workload::Mixed(Ratio::default()));
        assert_eq!(s.keys, 100_000);
        let s = settings(&["read", "--keys", "1m", "--threads", "1,2", "--ops", "5k"]).unwrap();
        assert_eq!((s.workload, s.keys), (Workload::Read, 1_000_000));
        assert_eq!(s.threads, Threads::Fixed(vec![1, 2]));
        assert_eq!(s.limit, StepLimit::Ops(5000));
        let s = settings(&["write", "--access", "mmap,standard", "--duration", "3s"]).unwrap();
        assert_eq!(s.modes, [DiskAccessMode::Mmap, DiskAccessMode::Standard]);
        assert_eq!(s.limit, StepLimit::Time(Duration::from_secs(3)));
        assert_eq!(s.threads, Threads::Sweep { min: 4, max: 1000 });
        let s = settings(&["write", "--sync", "group", "--dist", "zipf(1.2)"]).unwrap();
        assert_eq!(
            s.sync,
            Some(CommitLogSync::Group {
                window: Duration::from_millis(1)
            })
        );
        assert_eq!(s.dist, KeyDist::Zipf(1.2));
        assert_eq!(s.target, TargetKind::Table);
        let s = settings(&["write", "--sync", "group:100us"]).unwrap();
        assert_eq!(
            s.sync,
            Some(CommitLogSync::Group {
                window: Duration::from_micros(100)
            })
        );
        let s = settings(&["write", "--sync", "periodic:50ms", "--target", "segments"]).unwrap();
        assert_eq!(s.sync, Some(CommitLogSync::Periodic { period_ms: 50 }));
        assert_eq!(s.target, TargetKind::Segment);
        let s = settings(&["write", "--sync", "batch", "--target", "segment"]).unwrap();
        assert_eq!(
            (s.sync, s.target),
            (Some(CommitLogSync::Batch), TargetKind::Segment)
        );
        assert_eq!(settings(&["write"]).unwrap().sync, None);
    }

    #[test]
    fn bad_arguments_are_errors_not_panics() {
        for (args, why) in [
            (&["scan"][..], "unknown workload"),
            (&["mixed(read=1)"], "quote it"),
            (&[" "], "unknown workload \"\""),
            (&["mixed ratio(read=1,write=x)"], "is not a whole number"),
            (&["read", "ratio(read=1,write=1)"], "only to the mixed"),
            (&["mixed", "ratio(read=1)", "ratio(write=1)"], "twice"),
            (&["read", "n=10", "--keys", "10"], "once"),
            (&["read", "n=0"], "at least 1"),
            (&["read", "n=ten"], "not a count"),
            (&["read", "x=1"], "unexpected"),
            (&["read", "n=1b", "--key-size", "4"], "cannot hold"),
            (&["read", "--access", "mmap,fast"], "valid values are"),
            (&["read", "--access", "mmap,mmap"], "twice"),
            (&["read", "--sync", "always"], "invalid value"),
            (&["read", "--sync", "group:fast"], "valid values are"),
            (&["read", "--sync", "batch:1ms"], "valid values are"),
            (&["read", "--target", "heap"], "invalid value"),
            (&["read", "--threads", "0"], "1 to"),
            (&["read", "--threads", "x"], "invalid value"),
            (
                &["read", "--min-threads", "8", "--max-threads", "4"],
                "min <= max",
            ),
            (
                &["read", "--threads", "2", "--max-threads", "4"],
                "cannot be used with",
            ),
            (&["read", "--duration", "10x"], "unknown unit"),
            (&["read", "--duration", "0s"], "positive duration"),
            (
                &["read", "--duration", "1s", "--ops", "5"],
                "cannot be used with",
            ),
            (&["read", "--ops", "0"], "at least 1"),
            (&["read", "--dist", "zipf(0)"], "--dist"),
            (&["read", "--dist", "normal"], "--dist"),
            (&["read", "--compact-every", "1"], "at least 2"),
            (&["read", "--value-size", "999999999"], "over the limit"),
            (&[], "required"),
        ] {
            let e = settings(args).unwrap_err();
            assert!(e.contains(why), "{args:?}: {e}");
        }
    }

    #[test]
    fn rates_parse_as_n_per_second() {
        assert_eq!(parse_rate("20000/s"), Ok(20_000.0));
        assert_eq!(parse_rate("20000"), Ok(20_000.0));
        assert_eq!(parse_rate("20k/s"), Ok(20_000.0));
        assert_eq!(parse_rate(" 1.5M/S "), Ok(1_500_000.0));
        assert_eq!(parse_rate("0.5/s"), Ok(0.5));
        for bad in [
            "fast", "0/s", "0", "-5/s", "/s", "", "10/m", "1e3/s", "k/s", "2g/s",
        ] {
            let e = parse_rate(bad).unwrap_err();
            assert!(e.contains("not a rate"), "{bad}: {e}");
        }
        assert!(parse_rate("2000m/s")
            .unwrap_err()
            .contains("over the limit"));
    }

    #[test]
    fn rate_mode_runs_one_thread_count() {
        let s = settings(&["read", "--rate", "1000/s,5k/s", "--threads", "2"]).unwrap();
        assert_eq!(s.rates, [1000.0, 5000.0]);
        assert_eq!(s.threads, Threads::Fixed(vec![2]));
        let s = settings(&["read", "--rate", "100"]).unwrap();
        assert_eq!(s.threads, Threads::Fixed(vec![DEFAULT_RATE_THREADS]));
        assert!(settings(&["read"]).unwrap().rates.is_empty());
        for (args, why) in [
            (&["read", "--rate", "fast"][..], "not a rate"),
            (&["read", "--rate", "0/s"], "not a rate"),
            (&["read", "--rate", "100/s,"], "not a rate"),
            (
                &["read", "--rate", "100", "--threads", "1,2"],
                "one thread count",
            ),
            (
                &["read", "--rate", "100", "--max-threads", "8"],
                "cannot be used with",
            ),
            (&["read", "--rate", "100", "--threads", "0"], "1 to"),
        ] {
            let e = settings(args).unwrap_err();
            assert!(e.contains(why), "{args:?}: {e}");
        }
    }

    #[test]
    fn durations_and_counts() {
        assert_eq!(parse_duration("10s"), Ok(Duration::from_secs(10)));
        assert_eq!(parse_duration("10"), Ok(Duration::from_secs(10)));
        assert_eq!(parse_duration("250ms"), Ok(Duration::from_millis(250)));
        assert_eq!(parse_duration("1.5m"), Ok(Duration::from_secs(90)));
        assert!(parse_duration("s").is_err());
        assert!(parse_duration("-1s").is_err());
        assert_eq!(parse_count("200k"), Ok(200_000));
        assert_eq!(parse_count("2M"), Ok(2_000_000));
        assert!(parse_count("99999999999b").is_err());
        assert!(parse_count("").is_err());
    }
}
