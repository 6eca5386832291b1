//! The ingest journal, `ingest.pending`: the commit point of a bulk ingest across
//! tables (`Store::ingest`, ARCHITECTURE.md invariant 12).
//!
//! Each table has its own manifest, so no single manifest replacement can adopt
//! segments into several tables at once. The journal names every segment an ingest
//! adopts, by table and id, and is published (temp, fsync, rename, fsync directory)
//! once the segments' files are durable under their store names and before any manifest
//! names them. Then the manifests are replaced, one per table, and the journal is
//! replaced by an empty one, all before any read, flush or compaction can see the new
//! segments. Recovery at open ([`crate::recovery`]) reads it before the orphan scan:
//! a journal naming segments rolls them forward into their manifests (idempotent: a
//! manifest that names them already is left alone), then is emptied. No journal, or an
//! empty one, means no ingest was committed: the placed files are orphans, removed by
//! the scan. So after a crash at any point either every table has all its ingested
//! segments or none has any.
//!
//! Sealed text (`format::sealed`):
//! ```text
//! segstore-ingest 1
//! segment <table> <id>   (zero or more; none: no ingest in progress)
//! crc32c <8 hex digits>
//! ```

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

use crate::error::{Error, Result};
use crate::format::sealed::{self, SealedWriter};
use crate::format::Malformed;
use crate::io::StoreFs;
use crate::layout::StoreFile;
use crate::segment::validate_name;

const FORMAT: &str = "segstore-ingest";
const VERSION: u32 = 1;

/// The segments an ingest adopts, per table (empty: none in progress).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct IngestJournal {
    /// Segment ids per table.
    pub segments: BTreeMap<String, BTreeSet<u64>>,
}

/// The journal's path in store directory `dir`.
pub fn path(dir: &Path) -> PathBuf {
    StoreFile::IngestJournal.path(dir)
}

impl IngestJournal {
    /// Nothing in progress?
    pub fn is_empty(&self) -> bool {
        self.segments.values().all(BTreeSet::is_empty)
    }

    /// Encode.
    pub fn encode(&self) -> Vec<u8> {
        let mut w = SealedWriter::new(FORMAT, VERSION);
        for (table, ids) in &self.segments {
            for id in ids {
                w.line(["segment", table.as_str(), &id.to_string()]);
            }
        }
        w.finish()
    }

    /// Decode, naming `path` in errors.
    pub fn decode(path: &Path, bytes: &[u8]) -> Result<IngestJournal> {
        Self::decode_body(bytes).map_err(|m| m.into_error(path))
    }

    fn decode_body(bytes: &[u8]) -> std::result::Result<IngestJournal, Malformed> {
        let mut j = IngestJournal::default();
        for line in sealed::decode(bytes, FORMAT, VERSION..=VERSION)?.lines {
            let f = line.fields()?;
            if f.keyword() != b"segment" {
                return Err(Malformed::new(
                    f.offset,
                    format!("unknown line {:?}", sealed::escape(f.keyword())),
                ));
            }
            f.expect_len(3)?;
            let table = f.str(1)?;
            validate_name("table", table).map_err(|e| Malformed::new(f.offset, e.to_string()))?;
            if !j.segments.entry(table.to_string()).or_default().insert(f.u64(2)?) {
                return Err(Malformed::new(f.offset, "segment named twice"));
            }
        }
        Ok(j)
    }

    /// The journal of store directory `dir`, if it has one.
    pub fn load(dir: &Path) -> Result<Option<IngestJournal>> {
        let p = path(dir);
        match std::fs::read(&p) {
            Ok(bytes) => Self::decode(&p, &bytes).map(Some),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
            Err(e) => Err(Error::io("read", &p, e)),
        }
    }

    /// Replace the journal of `dir` atomically and durably (invariant 5).
    pub fn store(&self, dir: &Path, fs: &StoreFs) -> Result<()> {
        fs.write_atomic(&path(dir), &self.encode())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trips_and_detects_damage() {
        let mut j = IngestJournal::default();
        assert!(j.is_empty());
        let p = Path::new("ingest.pending");
        assert_eq!(IngestJournal::decode(p, &j.encode()).unwrap(), j);
        j.segments.entry("users".into()).or_default().extend([3, 4]);
        j.segments.entry("orders".into()).or_default().insert(9);
        assert!(!j.is_empty());
        let b = j.encode();
        assert!(b.starts_with(b"segstore-ingest 1\n"));
        assert_eq!(IngestJournal::decode(p, &b).unwrap(), j);
        for i in 0..b.len() {
            let mut c = b.clone();
            c[i] ^= 0x04;
            assert!(IngestJournal::decode(p, &c).is_err(), "flip at {i} undetected");
        }
        let e = IngestJournal::decode(p, &b[..b.len() - 2]).unwrap_err();
        assert!(e.is_corrupt() && e.to_string().contains("ingest.pending"), "{e}");
    }

    #[test]
    fn malformed_lines_are_corrupt() {
        let p = Path::new("ingest.pending");
        for body in [
            &[&b"segment"[..], b"a/b", b"1"][..],
            &[&b"segment"[..], b"t", b"x"],
            &[&b"segment"[..], b"t"],
            &[&b"segments"[..], b"t", b"1"],
        ] {
            let bytes = sealed::encode(FORMAT, VERSION, [body.iter().copied()]);
            assert!(IngestJournal::decode(p, &bytes).unwrap_err().is_corrupt());
        }
        let twice = sealed::encode(
            FORMAT,
            VERSION,
            [["segment", "t", "1"], ["segment", "t", "1"]],
        );
        assert!(IngestJournal::decode(p, &twice).unwrap_err().is_corrupt());
    }
}
