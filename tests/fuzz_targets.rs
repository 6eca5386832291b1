//! The cargo-fuzz targets of `fuzz/` as proptest byte-mutation tests, so CI runs them
//! without a fuzzer: the same harnesses (`fuzz/harness.rs`), fed by proptest. Each must
//! never panic on any input. `PROPTEST_CASES` raises the case count (default 256, or
//! 64 for the segment and commit log targets, which write files per case).
#![allow(clippy::disallowed_methods)] // writes fuzz inputs to files, outside the store's I/O boundary

#[path = "../fuzz/harness.rs"]
mod harness;

use proptest::prelude::*;

/// Mutation lists for the file-based harnesses: mostly byte flips, some truncations.
fn mutations() -> impl Strategy<Value = Vec<u8>> {
    prop::collection::vec(
        (0u8..3, any::<u16>(), any::<u8>(), prop::bool::weighted(0.1)).prop_map(
            |(file, off, byte, cut)| {
                vec![
                    file | if cut { 0x80 } else { 0 },
                    (off >> 8) as u8,
                    off as u8,
                    byte,
                ]
            },
        ),
        0..6,
    )
    .prop_map(|v| v.concat())
}

fn cases(default: u32) -> ProptestConfig {
    let cases = std::env::var("PROPTEST_CASES")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(default);
    ProptestConfig {
        cases,
        failure_persistence: None,
        ..ProptestConfig::default()
    }
}

/// Valid frames of the text formats, to mutate from (random bytes rarely pass a
/// checksum, so these reach the parsers past it only through near-valid inputs).
fn text_seeds() -> Vec<Vec<u8>> {
    use segstore::lifecycle::deleter::encode_journal;
    use segstore::lifecycle::{Manifest, SnapshotManifest};
    use segstore::table::positions::Positions;
    let m = Manifest {
        table: "t".into(),
        next_id: 9,
        segments: [1, 3, 4].into_iter().collect(),
        settings: [("gc_grace_secs".to_string(), "0".to_string())]
            .into_iter()
            .collect(),
        levels: [(3, 1)].into_iter().collect(),
    };
    let mut s = SnapshotManifest::default();
    s.tables.entry("t".into()).or_default().extend([1, 3]);
    let mut p = Positions::default();
    p.flushed.insert("t".into(), 7);
    let j = encode_journal(&["t-1-Data.db".into(), "snapshots/a b\n/x\\y".into()]).unwrap();
    vec![m.encode(), s.encode(), p.encode(), j]
}

/// Decode `b` as the kind of text file `text_seeds()[kind]` is (debug form).
fn decode_text(kind: usize, b: &[u8]) -> segstore::Result<String> {
    use segstore::lifecycle::deleter::decode_journal;
    use segstore::lifecycle::{Manifest, SnapshotManifest};
    use segstore::table::positions::Positions;
    let p = std::path::Path::new("the-file");
    Ok(match kind {
        0 => format!("{:?}", Manifest::decode(p, b)?),
        1 => format!("{:?}", SnapshotManifest::decode(p, b)?),
        2 => format!("{:?}", Positions::decode(p, b)?),
        _ => format!("{:?}", decode_journal(p, b)?),
    })
}

proptest! {
    #![proptest_config(cases(64))]

    #[test]
    fn segment_open_and_read_never_panics(data in mutations()) {
        harness::segment(&data);
    }

    #[test]
    fn commitlog_replay_never_panics(data in mutations()) {
        harness::commitlog(&data);
    }
}

proptest! {
    #![proptest_config(cases(256))]

    #[test]
    fn manifest_decode_never_panics(data in prop::collection::vec(any::<u8>(), 0..200)) {
        harness::manifests(&data);
    }

    #[test]
    fn manifest_decode_of_mutated_valid_frames_never_panics(
        seed in 0usize..4,
        flips in prop::collection::vec((any::<u16>(), any::<u8>()), 0..3),
        cut in any::<u16>(),
    ) {
        let mut b = text_seeds()[seed].clone();
        for (off, x) in flips {
            if !b.is_empty() {
                let i = off as usize % b.len();
                b[i] ^= x;
            }
        }
        if cut % 4 == 0 && !b.is_empty() {
            b.truncate(cut as usize % b.len());
        }
        harness::manifests(&b);
    }

    #[test]
    fn text_file_with_a_changed_byte_is_corrupt_or_unchanged(
        seed in 0usize..4,
        at in any::<prop::sample::Index>(),
        xor in 1u8..,
        cut in prop::bool::weighted(0.2),
    ) {
        let good = text_seeds()[seed].clone();
        let mut b = good.clone();
        let i = at.index(b.len());
        if cut {
            b.truncate(i);
        } else {
            b[i] ^= xor;
        }
        let want = decode_text(seed, &good).unwrap();
        match decode_text(seed, &b) {
            Ok(got) => prop_assert_eq!(got, want),
            Err(segstore::Error::Corrupt { path, .. }) => {
                prop_assert_eq!(path, std::path::PathBuf::from("the-file"))
            }
            Err(e) => prop_assert!(false, "not Corrupt: {}", e),
        }
    }

    #[test]
    fn message_decode_never_panics(data in prop::collection::vec(any::<u8>(), 0..300)) {
        harness::message(&data);
    }
}

#[test]
fn unmutated_inputs_read_back() {
    harness::segment(&[]);
    harness::commitlog(&[]);
}
