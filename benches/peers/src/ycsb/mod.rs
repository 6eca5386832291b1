//! YCSB (issue 19, item 1): workloads A to F as YCSB's `CoreWorkload` defines them, run
//! in YCSB's order (load, then A, B, C, F, D, E) on one loaded data set per system, at
//! 1 and 2 threads, systems interleaved round by round; then single puts at 1, 2 and 4
//! threads; bulk load time and bytes on disk; and, with `--cap-mib`, random gets from a
//! child process in a memory cgroup whose limit caps its page cache. See README.md.

mod cap;
pub(crate) mod generators;
mod kv;
mod report;
#[cfg(feature = "rocksdb")]
mod rocks;
mod run;
pub(crate) mod workload;

use std::path::{Path, PathBuf};
use std::time::Instant;

use workload::{KeySpace, Workload};

/// Command line of `segstore-peers --ycsb`.
pub struct Args {
    pub keys: u64,
    pub rounds: usize,
    /// Operations per thread per phase (E does a tenth: its scans read up to 100 rows).
    pub ops: usize,
    /// `--e-ops N`: operations per thread in E's phases instead of a tenth of `ops`
    /// (YCSB runs every workload for the same `operationcount`; a tenth keeps the
    /// default run short, but leaves E's phases some 20 ms long).
    pub e_ops: Option<usize>,
    pub dir: Option<PathBuf>,
    pub only: Option<String>,
    /// Cap (MiB) of the memory cgroup the capped-gets child runs in.
    pub cap_mib: Option<u64>,
    /// Seconds the capped-gets child measures (after a third as long warming).
    pub cap_secs: f64,
    /// `--cap-child ID CGROUP`: run as the capped-gets child.
    pub cap_child: Option<(String, PathBuf)>,
    /// Skip the YCSB rounds (load, footprint and `--cap-mib` only).
    pub no_rounds: bool,
    /// `--phases A,C,P`: run only these workloads (`P`: the single puts), e.g. to
    /// profile one; `None`: all, in YCSB's order.
    pub phases: Option<String>,
    /// `--perf PHASE FIFO`: sample only this phase (a workload letter and a thread
    /// count, `E1`) of every round, by writing `enable` and `disable` to `perf
    /// record --control=fifo:FIFO`: its state is the one the phases before it leave.
    pub perf: Option<(String, PathBuf)>,
}

const USAGE: &str =
    "usage: segstore-peers --ycsb [--quick] [--keys N | --ten-million] [--rounds R] \
[--ops N] [--e-ops N] [--dir DIR] [--only ID[,ID]] [--phases A,B,C,D,E,F,P] [--cap-mib MIB] [--cap-secs S] \
[--no-rounds] [--values random|json] [--perf PHASE FIFO]\n\
systems: seg_auto seg_auto_nocrc seg_auto_m64 seg_auto_st seg_auto_t2 seg_auto_pread seg_auto_v3 seg_auto_v5 seg_auto_v6 seg_auto_v7 seg_auto_zstd seg_mmap seg_mmap_v5 seg_mmap_index_only seg_standard lmdb rocksdb fjall \
fjall_buffered redb";

fn parse(args: impl Iterator<Item = String>) -> Args {
    let mut a = Args {
        keys: 1_000_000,
        rounds: 3,
        ops: 30_000,
        e_ops: None,
        dir: None,
        only: None,
        cap_mib: None,
        cap_secs: 10.0,
        cap_child: None,
        no_rounds: false,
        phases: None,
        perf: None,
    };
    let mut it = args;
    while let Some(s) = it.next() {
        let mut val = || {
            it.next()
                .unwrap_or_else(|| panic!("{s} needs a value\n{USAGE}"))
        };
        match s.as_str() {
            "--keys" => a.keys = val().parse().expect("--keys N"),
            "--ten-million" => a.keys = 10_000_000,
            "--rounds" => a.rounds = val().parse().expect("--rounds R"),
            "--ops" => a.ops = val().parse().expect("--ops N"),
            "--e-ops" => a.e_ops = Some(val().parse().expect("--e-ops N")),
            "--dir" => a.dir = Some(PathBuf::from(val())),
            "--only" => a.only = Some(val()),
            "--cap-mib" => a.cap_mib = Some(val().parse().expect("--cap-mib MIB")),
            "--cap-secs" => a.cap_secs = val().parse().expect("--cap-secs S"),
            "--no-rounds" => a.no_rounds = true,
            "--phases" => a.phases = Some(val()),
            "--values" => match val().as_str() {
                "random" => workload::set_json_values(false),
                "json" => workload::set_json_values(true),
                other => panic!("--values {other}: random or json\n{USAGE}"),
            },
            "--quick" => {
                a.keys = 20_000;
                a.ops = 2_000;
                a.rounds = 1;
                a.cap_secs = 1.0;
            }
            "--perf" => {
                let phase = val();
                a.perf = Some((phase, PathBuf::from(val())));
            }
            "--cap-child" => {
                let id = val();
                a.cap_child = Some((id, PathBuf::from(val())));
            }
            "-h" | "--help" => {
                println!("{USAGE}");
                std::process::exit(0);
            }
            other => panic!("unknown argument {other}\n{USAGE}"),
        }
    }
    assert!(
        a.keys >= 100 && a.ops >= 10 && a.e_ops.is_none_or(|n| n >= 1),
        "--keys, --ops or --e-ops too small\n{USAGE}"
    );
    a
}

/// What `--perf` writes to perf's control FIFO around phase `wl` at `threads`: a
/// command, or nothing for the other phases.
fn perf_of(a: &Args, wl: Workload, threads: usize) -> impl Fn(&[u8]) + '_ {
    let fifo = a
        .perf
        .as_ref()
        .filter(|(phase, _)| *phase == format!("{}{threads}", wl.letter()))
        .map(|(_, fifo)| fifo);
    move |cmd: &[u8]| {
        if let Some(fifo) = fifo {
            std::fs::write(fifo, cmd).expect("--perf: write to perf's control FIFO");
        }
    }
}

/// The phases of one round, in order: YCSB at 1 and 2 threads, then puts at 1, 2, 4.
pub fn phases() -> Vec<(Workload, usize)> {
    let mut v: Vec<(Workload, usize)> = Workload::YCSB_ORDER
        .into_iter()
        .flat_map(|w| [(w, 1), (w, 2)])
        .collect();
    v.extend([1, 2, 4].map(|t| (Workload::Puts, t)));
    v
}

/// Operations per thread in a phase of `wl`.
fn ops_of(wl: Workload, a: &Args) -> usize {
    match wl {
        Workload::E => a.e_ops.unwrap_or((a.ops / 10).max(1)),
        Workload::Puts => (a.ops / 2).max(1),
        _ => a.ops,
    }
}

/// Load (or reuse) one system's data set; returns the load seconds (None when reused).
fn load_one(root: &Path, id: &str, sorted: &[u64]) -> Option<f64> {
    let marker = kv::marker(root, id);
    if marker.exists() {
        return None;
    }
    let d = kv::dir(root, id);
    let _ = std::fs::remove_dir_all(&d);
    let t = Instant::now();
    kv::load(id, &d, sorted);
    let secs = t.elapsed().as_secs_f64();
    std::fs::write(&marker, format!("{secs}\n")).unwrap();
    eprintln!("loaded {id:<16} in {secs:>6.1} s");
    Some(secs)
}

/// Item numbers `0..n` in key order (the sort the bulk paths need), made before timing.
fn sorted_items(n: u64) -> Vec<u64> {
    let mut v: Vec<(u64, u64)> = (0..n).map(|i| (generators::fnvhash64(i), i)).collect();
    v.sort_unstable();
    v.into_iter().map(|(_, i)| i).collect()
}

pub fn main(args: impl Iterator<Item = String>) {
    let a = parse(args);
    let tmp;
    let root = match &a.dir {
        Some(d) => {
            std::fs::create_dir_all(d).unwrap();
            d.clone()
        }
        None => {
            tmp = tempfile::Builder::new()
                .prefix("segstore-ycsb")
                .tempdir_in(std::env::var_os("PEERS_TMP").unwrap_or_else(|| "/var/tmp".into()))
                .unwrap();
            tmp.path().to_path_buf()
        }
    };
    if let Some((id, cg)) = &a.cap_child {
        cap::child(&root, id, cg, &a);
        return;
    }
    let ids = kv::systems(a.only.as_deref());
    println!(
        "YCSB: {} keys (16-byte keys, {}-byte {} values), {} rounds, {} ops per thread per phase \
         (E {}, puts {}), data in {}",
        a.keys,
        workload::VALUE_LEN,
        if workload::json_values() {
            "JSON-like"
        } else {
            "random"
        },
        a.rounds,
        a.ops,
        ops_of(Workload::E, &a),
        ops_of(Workload::Puts, &a),
        root.display()
    );
    let sorted = sorted_items(a.keys);
    let mut foot = Vec::new();
    for id in &ids {
        let loaded = load_one(&root, id, &sorted);
        let secs = loaded.or_else(|| {
            let s = std::fs::read_to_string(kv::marker(&root, id)).ok()?;
            s.trim().parse().ok()
        });
        foot.push(report::Footprint {
            id,
            reused: loaded.is_none(),
            load_secs: secs,
            disk: crate::disk_usage(&kv::dir(&root, id)),
        });
    }
    drop(sorted);
    report::footprint(&foot);
    if !a.no_rounds {
        rounds(&root, &ids, &a);
    }
    if let Some(mib) = a.cap_mib {
        cap::run_all(&root, &ids, mib, &a);
    }
}

/// Open every system, run the rounds, print the tables, close every system.
fn rounds(root: &Path, ids: &[&'static str], a: &Args) {
    let t = Instant::now();
    let mut warmed = 0;
    for id in ids {
        warmed += crate::read_all(&kv::dir(root, id));
    }
    eprintln!(
        "read {:.2} GiB of data files into the page cache in {:.1} s",
        warmed as f64 / (1u64 << 30) as f64,
        t.elapsed().as_secs_f64()
    );
    let systems: Vec<Box<dyn kv::Kv>> = ids
        .iter()
        .map(|id| kv::open(id, &kv::dir(root, id), 1 << 30))
        .collect();
    let phases: Vec<(Workload, usize)> = phases()
        .into_iter()
        .filter(|(w, _)| {
            a.phases
                .as_deref()
                .is_none_or(|p| p.split(',').any(|l| l == w.letter()))
        })
        .collect();
    let planned: usize = phases
        .iter()
        .filter(|(w, _)| w.inserts())
        .map(|&(w, t)| ops_of(w, a) * t)
        .sum::<usize>()
        * a.rounds
        / 20; // 5% of D's and E's operations insert
    let spaces: Vec<KeySpace> = ids
        .iter()
        .map(|_| KeySpace::new(a.keys, planned as u64))
        .collect();
    // Untimed: a tenth of a C phase on each, so the first timed phase does not pay for
    // first reads (block caches, index pages, checksums of first use).
    for (s, ks) in systems.iter().zip(&spaces) {
        run::phase(s.as_ref(), ks, Workload::C, 1, (a.ops / 10).max(1), 1);
    }
    // results[system][phase] = one Phase per round
    let mut results: Vec<Vec<Vec<run::Phase>>> = (0..systems.len())
        .map(|_| (0..phases.len()).map(|_| Vec::new()).collect())
        .collect();
    // The tables each E phase began with, per system that reports them: E's rate
    // depends on them more than any other phase's.
    let mut e_states = Vec::new();
    let started = Instant::now();
    for round in 0..a.rounds {
        for (pi, &(wl, threads)) in phases.iter().enumerate() {
            let seed = (round * 64 + pi) as u64 + 1000;
            // A fresh seeded order of the systems per phase: none always runs first.
            for si in crate::shuffled(systems.len(), seed) {
                let began = (wl == Workload::E).then(|| systems[si].state()).flatten();
                let sample = perf_of(a, wl, threads);
                sample(b"enable\n");
                let p = run::phase(
                    systems[si].as_ref(),
                    &spaces[si],
                    wl,
                    threads,
                    ops_of(wl, a),
                    seed,
                );
                sample(b"disable\n");
                results[si][pi].push(p);
                if let Some(state) = began {
                    e_states.push(report::EState {
                        system: si,
                        phase: pi,
                        round,
                        state,
                        end: systems[si].state(),
                    });
                }
            }
        }
        eprintln!(
            "round {}/{} done at {:.0} s",
            round + 1,
            a.rounds,
            started.elapsed().as_secs_f64()
        );
    }
    report::phases(ids, &phases, &results);
    report::e_rounds(ids, &phases, &results, &e_states);
    for s in systems {
        s.close();
    }
}
