//! The harness of the segment corruption suites (`segment_corruption*.rs`): write
//! damaged components, then open, get every key and a miss beside each, scan from
//! three places and verify, in one access mode, checking that every error is
//! `Error::Corrupt` naming an allowed component and that reads which succeed return
//! the model's cells.
#![allow(clippy::disallowed_methods)] // writes damaged segment files on purpose, outside the store's I/O boundary

use std::path::Path;

use segstore::io::registry;
use segstore::segment::{Component, PointLookup, ReaderOptions, SegmentReader};
use segstore::{DiskAccessMode, Error};

use super::{component_path, seg_name, Model};

/// The components, in the order the suites keep their bytes.
pub const COMPONENTS: [Component; 3] = Component::ALL;

/// How the damage must show.
#[derive(Debug, Clone, Copy)]
pub struct Expect<'a> {
    /// Components an error may name.
    pub may_name: &'a [Component],
    /// `open` must fail.
    pub open_fails: bool,
    /// `open` or `verify` must fail.
    pub must_detect: bool,
    /// Reads that succeed return exactly the original cells.
    pub exact: bool,
    /// If `verify` fails, the one component its error must name.
    pub verify_names: Option<Component>,
}

/// What went wrong where, if anything.
#[derive(Debug)]
pub enum Outcome {
    OpenFailed(Error),
    VerifyFailed(Error),
    Clean,
}

pub fn check_corrupt(e: &Error, dir: &Path, may_name: &[Component], ctx: &str) {
    match e {
        Error::Corrupt { path, reason, .. } => {
            assert!(
                may_name.iter().any(|c| component_path(dir, *c) == *path),
                "{ctx}: error names {} ({reason}), expected one of {may_name:?}",
                path.display()
            );
        }
        other => panic!("{ctx}: not a corruption error: {other}"),
    }
}

/// Write `files` to a fresh directory and exercise them in `mode`.
pub fn exercise(
    model: &Model,
    files: &[Vec<u8>; 3],
    mode: DiskAccessMode,
    x: Expect<'_>,
    what: &str,
) -> Outcome {
    let dir = tempfile::tempdir().unwrap();
    for (c, bytes) in COMPONENTS.iter().zip(files) {
        std::fs::write(component_path(dir.path(), *c), bytes).unwrap();
    }
    let ctx = format!("{mode}: {what}");
    let d = dir.path();
    let outcome = match SegmentReader::open(d, &seg_name(), mode.resolve()) {
        Err(e) => {
            check_corrupt(&e, d, x.may_name, &format!("{ctx}: open"));
            Outcome::OpenFailed(e)
        }
        Ok(r) => {
            assert!(!x.open_fails, "{ctx}: open succeeded");
            let mut o = ReaderOptions::default();
            o.point_lookup = PointLookup::Pages;
            let paged = SegmentReader::open_with(d, &seg_name(), mode.resolve(), &o)
                .unwrap_or_else(|e| panic!("{ctx}: opened, then not with the page index: {e}"));
            let through_pages = read_everything(model, &paged, d, x, &format!("{ctx} (pages)"));
            if x.must_detect {
                assert!(
                    !matches!(through_pages, Outcome::Clean),
                    "{ctx}: damage went unnoticed through the page index"
                );
            }
            drop(paged);
            read_everything(model, &r, d, x, &ctx)
        }
    };
    assert_eq!(
        registry().stats_under(d).maps,
        0,
        "{ctx}: mapping left open"
    );
    if x.must_detect {
        assert!(
            !matches!(outcome, Outcome::Clean),
            "{ctx}: damage went unnoticed"
        );
    }
    outcome
}

fn read_everything(
    model: &Model,
    r: &SegmentReader,
    d: &Path,
    x: Expect<'_>,
    ctx: &str,
) -> Outcome {
    for (k, c) in model {
        match r.get(k) {
            Ok(got) if x.exact => assert_eq!(got, Some(c.entry(k)), "{ctx}: get {k:?}"),
            Ok(_) => {}
            Err(e) => check_corrupt(&e, d, x.may_name, &format!("{ctx}: get {k:?}")),
        }
        let miss = [k.as_slice(), b"!"].concat();
        match r.get(&miss) {
            Ok(got) if x.exact => assert_eq!(got, None, "{ctx}: get {miss:?}"),
            Ok(_) => {}
            Err(e) => check_corrupt(&e, d, x.may_name, &format!("{ctx}: get {miss:?}")),
        }
    }
    for start in [&b""[..], b"key0075", b"key0149!"] {
        let mut got = Vec::new();
        let mut failed = false;
        match r.scan(start..) {
            Err(e) => {
                check_corrupt(&e, d, x.may_name, &format!("{ctx}: scan open"));
                failed = true;
            }
            Ok(it) => {
                for e in it {
                    match e {
                        Ok(e) => got.push(e),
                        Err(e) => {
                            check_corrupt(&e, d, x.may_name, &format!("{ctx}: scan"));
                            failed = true;
                            break;
                        }
                    }
                }
            }
        }
        if x.exact && !failed {
            let want: Vec<_> = model
                .range(start.to_vec()..)
                .map(|(k, c)| c.entry(k))
                .collect();
            assert_eq!(got, want, "{ctx}: scan from {start:?}");
        }
    }
    match r.verify() {
        Ok(n) => {
            assert_eq!(n, model.len() as u64, "{ctx}: verify count");
            Outcome::Clean
        }
        Err(e) => {
            let names = x.verify_names.as_slice();
            let names = if names.is_empty() { x.may_name } else { names };
            check_corrupt(&e, d, names, &format!("{ctx}: verify"));
            Outcome::VerifyFailed(e)
        }
    }
}
