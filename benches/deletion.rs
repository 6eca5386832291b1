//! Lifecycle costs (issue 3):
//! - `delete_after_last_close`: time from dropping the last handle of an obsolete,
//!   mapped segment to its files being unlinked (the deleter's completion callback), under
//!   `DeferWhileMapped`. Target: under 1 ms median, no polling.
//! - `get_handle_cost`: a point lookup through a view loaded per get, and through a handle
//!   cloned per get, versus one handle held for the whole run. Target: under 5%.
//!
//! `cargo bench --bench deletion`

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use criterion::{criterion_group, criterion_main, Criterion};
use segstore::lifecycle::SegmentSet;
use segstore::{Config, DeletePolicy, DiskAccessMode, FileRules, Store};

fn config() -> Config {
    let mut c = Config::default();
    c.disk_access_mode = DiskAccessMode::Mmap;
    c.delete_policy = DeletePolicy::DeferWhileMapped;
    c.track_leaks = false;
    c.file_rules = FileRules::posix();
    c
}

fn write_segment(set: &SegmentSet, n: u32, ts: u64) -> segstore::segment::SegmentName {
    let mut w = set.writer().unwrap();
    let name = w.name().clone();
    for i in 0..n {
        w.add(format!("key{i:08}").as_bytes(), &[7u8; 100], ts, false)
            .unwrap();
    }
    w.finish().unwrap();
    set.add(std::slice::from_ref(&name)).unwrap();
    name
}

fn delete_after_last_close(c: &mut Criterion) {
    let tmp = tempfile::tempdir().unwrap();
    let store = Store::open(tmp.path(), config()).unwrap();
    let set = store.segments("t").unwrap();
    let done: Arc<Mutex<Vec<Instant>>> = Arc::default();
    let d = done.clone();
    store
        .deleter()
        .set_on_complete(move |_| d.lock().unwrap().push(Instant::now()));
    c.bench_function("delete_after_last_close", |b| {
        b.iter_custom(|iters| {
            let mut total = Duration::ZERO;
            for _ in 0..iters {
                let old = write_segment(&set, 1000, 1);
                let held = set.view().segments[0].clone();
                set.replace(&[old.id], &[]).unwrap();
                done.lock().unwrap().clear();
                let t0 = Instant::now();
                drop(held); // last handle: unmap, then the deleter unlinks 3 files
                let last = *done.lock().unwrap().last().expect("deleted synchronously");
                total += last - t0;
                let live = set.live_ids();
                set.replace(&live, &[]).unwrap();
            }
            total
        })
    });
    drop(set);
    store.close().unwrap();
}

fn get_handle_cost(c: &mut Criterion) {
    let tmp = tempfile::tempdir().unwrap();
    let store = Store::open(tmp.path(), config()).unwrap();
    let set = store.segments("t").unwrap();
    let n = 200_000u32;
    write_segment(&set, n, 1);
    let keys: Vec<Vec<u8>> = {
        let mut x = 0x9E37_79B9_7F4A_7C15u64;
        (0..1000)
            .map(|_| {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                format!("key{:08}", x % n as u64).into_bytes()
            })
            .collect()
    };
    let held = set.view().segments[0].clone();
    interleaved_handle_cost(&set, &held, &keys);
    let mut g = c.benchmark_group("get_handle_cost_1000_gets");
    g.bench_function("one_handle_held", |b| {
        b.iter(|| {
            let mut s = 0usize;
            for k in &keys {
                s += held.get_with(k, |r| r.value.len()).unwrap().unwrap_or(0);
            }
            s
        })
    });
    g.bench_function("view_loaded_per_get", |b| {
        b.iter(|| {
            let mut s = 0usize;
            for k in &keys {
                let v = set.view();
                s += v.segments[0]
                    .get_with(k, |r| r.value.len())
                    .unwrap()
                    .unwrap_or(0);
            }
            s
        })
    });
    g.bench_function("with_view_per_get", |b| {
        b.iter(|| {
            let mut s = 0usize;
            for k in &keys {
                s += set
                    .with_view(|v| v.segments[0].get_with(k, |r| r.value.len()))
                    .unwrap()
                    .unwrap_or(0);
            }
            s
        })
    });
    g.bench_function("handle_cloned_per_get", |b| {
        b.iter(|| {
            let mut s = 0usize;
            for k in &keys {
                let h = set.view().segments[0].clone();
                s += h.get_with(k, |r| r.value.len()).unwrap().unwrap_or(0);
            }
            s
        })
    });
    g.finish();
    drop(held);
    drop(set);
    store.close().unwrap();
}

/// The same four read paths, run in turns of 1,000 gets for 201 rounds so that machine
/// noise hits all alike; prints each path's median ns per get and its ratio to holding
/// one handle (criterion's sequential rows disagree by +-30% between runs on a shared VM).
fn interleaved_handle_cost(
    set: &SegmentSet,
    held: &segstore::lifecycle::SegmentHandle,
    keys: &[Vec<u8>],
) {
    type Path<'a> = (&'a str, Box<dyn Fn(&[u8]) -> usize + 'a>);
    let paths: Vec<Path> = vec![
        (
            "one_handle_held",
            Box::new(|k| held.get_with(k, |r| r.value.len()).unwrap().unwrap_or(0)),
        ),
        (
            "view_loaded_per_get",
            Box::new(|k| {
                set.view().segments[0]
                    .get_with(k, |r| r.value.len())
                    .unwrap()
                    .unwrap_or(0)
            }),
        ),
        (
            "with_view_per_get",
            Box::new(|k| {
                set.with_view(|v| v.segments[0].get_with(k, |r| r.value.len()))
                    .unwrap()
                    .unwrap_or(0)
            }),
        ),
        (
            "handle_cloned_per_get",
            Box::new(|k| {
                let h = set.view().segments[0].clone();
                h.get_with(k, |r| r.value.len()).unwrap().unwrap_or(0)
            }),
        ),
    ];
    let mut samples: Vec<Vec<f64>> = vec![Vec::new(); paths.len()];
    let mut sink = 0usize;
    for round in 0..201 {
        for i in 0..paths.len() {
            let p = &paths[(i + round) % paths.len()];
            let t = Instant::now();
            for k in keys {
                sink += (p.1)(k);
            }
            samples[(i + round) % paths.len()]
                .push(t.elapsed().as_nanos() as f64 / keys.len() as f64);
        }
    }
    let median = |v: &mut Vec<f64>| {
        v.sort_by(|a, b| a.total_cmp(b));
        v[v.len() / 2]
    };
    let base = median(&mut samples[0].clone());
    for (i, (name, _)) in paths.iter().enumerate() {
        let m = median(&mut samples[i]);
        println!(
            "interleaved {name:<22} {m:7.1} ns/get  {:+5.1}% vs one handle held",
            (m / base - 1.0) * 100.0
        );
    }
    std::hint::black_box(sink);
}

criterion_group! {
    name = benches;
    config = Criterion::default().sample_size(20).measurement_time(Duration::from_secs(3)).warm_up_time(Duration::from_secs(1));
    targets = delete_after_last_close, get_handle_cost
}
criterion_main!(benches);
