//! The deletion journal (`deletions.pending`) keeps every path exactly (defect 8 of
//! issue 11): a path holding a newline, a backslash, a space or bytes that are not UTF-8
//! is one entry after a restart, never two entries naming other files and never a
//! lossy name that deletes a different file.
#![allow(clippy::disallowed_methods)] // plants files and journals, outside the store's I/O boundary
#![cfg(unix)]

use std::ffi::OsStr;
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};

use segstore::lifecycle::deleter::JOURNAL;
use segstore::lifecycle::Deleter;
use segstore::{DeletePolicy, FileRules};

fn name(b: &[u8]) -> PathBuf {
    PathBuf::from(OsStr::from_bytes(b))
}

/// Every deletion is refused: requests stay pending in the journal.
fn refusing() -> FileRules {
    FileRules::windows_emulation_with_refusals(1.0, 7)
}

fn pending(d: &Deleter) -> Vec<PathBuf> {
    let mut v: Vec<PathBuf> = d.pending().into_iter().map(|p| p.path).collect();
    v.sort();
    v
}

/// Request the deletion of `victims` while every unlink is refused, restart (the
/// journal is all that carries them over), then restart once more with deletes allowed.
/// Exactly the victims go; every bystander stays.
fn survives_restart(victims: &[PathBuf], bystanders: &[PathBuf]) {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    for p in victims.iter().chain(bystanders) {
        std::fs::write(dir.join(p), b"x").unwrap();
    }
    let d = Deleter::open(dir, refusing(), DeletePolicy::Immediate).unwrap();
    d.delete(victims).unwrap();
    let mut want = victims.to_vec();
    want.sort();
    assert_eq!(pending(&d), want);
    drop(d);
    let journal = std::fs::read(dir.join(JOURNAL)).unwrap();
    assert!(
        std::str::from_utf8(&journal).is_ok(),
        "the journal stays text: {journal:?}"
    );

    let d = Deleter::open(dir, refusing(), DeletePolicy::Immediate).unwrap();
    assert_eq!(
        pending(&d),
        want,
        "journal read back: {}",
        String::from_utf8_lossy(&journal)
    );
    drop(d);

    let d = Deleter::open(dir, FileRules::posix(), DeletePolicy::Immediate).unwrap();
    assert!(pending(&d).is_empty());
    for v in victims {
        assert!(!dir.join(v).exists(), "{v:?} deleted");
    }
    for b in bystanders {
        assert!(dir.join(b).exists(), "{b:?} must survive");
    }
}

#[test]
fn a_path_with_a_newline_is_one_entry_and_forges_none() {
    survives_restart(
        &[name(b"a\nb"), name(b"c\r\nd")],
        &[name(b"a"), name(b"b"), name(b"c\r"), name(b"c"), name(b"d")],
    );
}

#[test]
fn a_path_that_looks_like_journal_syntax_is_kept_as_is() {
    survives_restart(
        &[
            name(b"crc32c 00000000"),
            name(b"x\ncrc32c 00000000\nsegstore-pending-deletions 2"),
            name(b"back\\x0aslash"),
            name(b"\\e"),
            name(b" lead and trail "),
        ],
        &[name(b"back\nslash"), name(b"e"), name(b"x")],
    );
}

#[test]
fn a_path_that_is_not_utf8_is_deleted_and_its_lossy_twin_is_not() {
    // The old journal wrote `to_string_lossy()`: `x\xff` came back as `x\u{fffd}`.
    survives_restart(
        &[name(b"x\xff"), name(b"\xc3(")],
        &["x\u{fffd}".into(), "\u{fffd}(".into()],
    );
}

#[test]
fn journal_lines_are_escaped_text() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    let p = Path::new("a\nb");
    std::fs::write(dir.join(p), b"x").unwrap();
    let d = Deleter::open(dir, refusing(), DeletePolicy::Immediate).unwrap();
    d.delete(&[p]).unwrap();
    drop(d);
    let text = std::fs::read_to_string(dir.join(JOURNAL)).unwrap();
    let lines: Vec<&str> = text.lines().collect();
    assert_eq!(lines.len(), 3, "{text}");
    assert_eq!(lines[0], "segstore-pending-deletions 2");
    assert_eq!(lines[1], r"delete a\x0ab");
    assert!(lines[2].starts_with("crc32c "));
}

/// A journal written before the sealed codec (version 1: one raw path per line) is
/// still completed at open.
#[test]
fn a_version_1_journal_is_still_read() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    for f in ["t-1-Data.db", "t-2-Data.db"] {
        std::fs::write(dir.join(f), b"x").unwrap();
    }
    let body = "segstore-pending-deletions 1\nt-1-Data.db\n";
    let crc = segstore::format::checksum(body.as_bytes());
    std::fs::write(dir.join(JOURNAL), format!("{body}crc32c {crc:08x}\n")).unwrap();
    let d = Deleter::open(dir, FileRules::posix(), DeletePolicy::Immediate).unwrap();
    assert!(pending(&d).is_empty());
    assert!(!dir.join("t-1-Data.db").exists());
    assert!(dir.join("t-2-Data.db").exists());
}
