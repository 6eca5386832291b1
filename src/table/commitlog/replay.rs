//! Replaying a commit log directory: every record, in sequence order, from every file.
//!
//! # Where replay stops, and when that is an error
//!
//! Records in a file carry consecutive sequence numbers starting at the `first_seq` of
//! the file header. Replay of a file stops at the first record that is truncated, fails
//! its checksum, or carries an unexpected sequence number; earlier records of the file
//! are all returned, later bytes of the file are ignored, and a `tracing::warn!` names
//! the file and offset. Whether the stop is an error is decided by what comes next:
//!
//! 1. **No later file** (the stop is in the newest file): a torn tail from a crash or a
//!    power loss. Replay ends there; this is never an error (PostgreSQL and RocksDB's
//!    point-in-time recovery do the same). A flipped bit in the middle of the newest
//!    file is indistinguishable from a torn write and is treated the same way: the
//!    records after it are dropped with the warning.
//! 2. **A later file starts exactly at the sequence number where replay stopped**: the
//!    stop is an old torn tail. The run that crashed there replayed up to the same
//!    point, then started a new file that reuses those numbers; nothing was lost. Not
//!    an error.
//! 3. **A later file starts beyond that sequence number**: records that were once
//!    acknowledged (or at least written) are missing from the middle of the log. If any
//!    of the missing numbers is at or above `replay_from` (the data is not in a flushed
//!    segment), this is [`Error::Corrupt`] naming the file and offset of the stop.
//!    Otherwise the lost records were flushed already: warning only.
//! 4. **A later file starts below it** (numbers would repeat): [`Error::Corrupt`] naming
//!    the later file.
//! 5. **The oldest file starts beyond `replay_from`**: the records from `replay_from`
//!    up to its first sequence number are not in a flushed segment and no file holds
//!    them (an older file was deleted): [`Error::Corrupt`] naming the oldest file. Files
//!    are released only once the next file starts at or below the lowest unflushed
//!    number, and that number is persisted first, so no run or crash leaves a log that
//!    starts beyond it. A directory with no file at all replays nothing and is not an
//!    error: with every file gone nothing says whether records at or above
//!    `replay_from` ever existed, and removing the whole log of a store closed cleanly
//!    (everything flushed) is legitimate.
//!
//! A file whose header is unreadable is a stop at offset 0 under the same rules (a crash
//! while creating a file leaves a short header). I/O errors are returned as
//! [`Error::Io`] and end the replay.
//!
//! Files whose records all lie below `replay_from` (the next file starts at or below it)
//! are skipped without being read.

use std::fs::File;
use std::io::{BufReader, Read};
use std::path::{Path, PathBuf};

use super::format::{self, LogRecord, FILE_HEADER_LEN, FRAME_HEADER_LEN};
use crate::error::{Error, Result};

pub use crate::layout::{
    commitlog_file_name as file_name, parse_commitlog_file_name as parse_file_name,
    COMMITLOG_PREFIX as FILE_PREFIX, COMMITLOG_SUFFIX as FILE_SUFFIX,
};

/// The log files in `dir`, by ascending number. A missing directory has none.
pub fn list_files(dir: &Path) -> Result<Vec<(u64, PathBuf)>> {
    let rd = match std::fs::read_dir(dir) {
        Ok(rd) => rd,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(e) => return Err(Error::io("read dir", dir, e)),
    };
    let mut files = Vec::new();
    for de in rd {
        let de = de.map_err(|e| Error::io("read dir", dir, e))?;
        if let Some(id) = de.file_name().to_str().and_then(parse_file_name) {
            files.push((id, de.path()));
        }
    }
    files.sort();
    Ok(files)
}

/// The oldest log file in `dir` whose header reads, with its first sequence number
/// (`None`: no file, or none with a readable header).
pub fn oldest_start(dir: &Path) -> Result<Option<(PathBuf, u64)>> {
    for (_, path) in list_files(dir)? {
        let mut header = Vec::with_capacity(FILE_HEADER_LEN);
        File::open(&path)
            .and_then(|f| f.take(FILE_HEADER_LEN as u64).read_to_end(&mut header))
            .map_err(|e| Error::io("read", &path, e))?;
        if let Ok(h) = format::decode_file_header(&header) {
            return Ok(Some((path, h.first_seq)));
        }
    }
    Ok(None)
}

/// Where and why replay of one file stopped early.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ReplayStop {
    /// The file.
    pub path: PathBuf,
    /// Byte offset of the first record not replayed.
    pub offset: u64,
    /// What was wrong there.
    pub reason: String,
    /// The sequence number the record there should have carried, if known.
    pub expected_seq: Option<u64>,
}

/// A log file as replay found it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LogFileInfo {
    /// File number.
    pub id: u64,
    /// Path.
    pub path: PathBuf,
    /// Sequence number of its first record: from the header, or, for a file whose
    /// header is unreadable, the number replay expected there (0 if unknown).
    pub first_seq: u64,
}

/// What a finished replay found.
#[derive(Debug, Clone, Default)]
pub struct ReplayOutcome {
    /// Every log file, by ascending number.
    pub files: Vec<LogFileInfo>,
    /// One past the last valid record (or the newest valid header's `first_seq`):
    /// where a new log must continue numbering. `None` for an empty directory.
    pub resume_seq: Option<u64>,
    /// Every early stop (all of them tolerated; see the module docs).
    pub stops: Vec<ReplayStop>,
    /// Records returned (those at or above `replay_from`).
    pub records: u64,
}

struct Cursor {
    reader: BufReader<File>,
    path: PathBuf,
    len: u64,
    pos: u64,
    expected: u64,
    /// Where the file's records hold their sequence numbers (its format version).
    layout: format::Layout,
}

/// Iterator over the records of a commit log directory. See the module docs.
pub struct Replay {
    files: Vec<(u64, PathBuf)>,
    headers: Vec<Option<u64>>,
    idx: usize,
    cur: Option<Cursor>,
    replay_from: u64,
    pending_stop: Option<ReplayStop>,
    out: ReplayOutcome,
    done: bool,
}

impl Replay {
    /// Replay the log in `dir`, returning records with `seq >= replay_from` (records
    /// below it are already in flushed segments).
    pub fn open(dir: &Path, replay_from: u64) -> Result<Replay> {
        let files = list_files(dir)?;
        let mut headers = Vec::with_capacity(files.len());
        for (_, path) in &files {
            headers.push(read_header(path)?.0.ok().map(|h| h.first_seq));
        }
        Ok(Replay {
            files,
            headers,
            idx: 0,
            cur: None,
            replay_from,
            pending_stop: None,
            out: ReplayOutcome::default(),
            done: false,
        })
    }

    /// Finish: the files and the numbering found. Call after the iterator is exhausted
    /// (records not yet iterated are not counted).
    pub fn finish(self) -> ReplayOutcome {
        self.out
    }

    fn stop(&mut self, path: PathBuf, offset: u64, reason: String, expected_seq: Option<u64>) {
        tracing::warn!(
            file = %path.display(),
            offset,
            %reason,
            "commit log replay stopped in {} at offset {offset}: {reason}; the rest of this file is ignored",
            path.display()
        );
        let stop = ReplayStop {
            path,
            offset,
            reason,
            expected_seq,
        };
        self.out.stops.push(stop.clone());
        // Keep the earliest stop: the loss (if any) runs from there.
        self.pending_stop.get_or_insert(stop);
        self.cur = None;
        self.idx += 1;
    }

    /// Judge a pending stop against the next file's first sequence number.
    fn settle(&mut self, path: &Path, first_seq: u64) -> Result<()> {
        if let Some(r) = self.out.resume_seq {
            if first_seq < r {
                return Err(Error::corrupt(
                    path,
                    8,
                    format!(
                        "file starts at sequence number {first_seq}, but earlier files reach {r}"
                    ),
                ));
            }
        }
        if self.out.files.is_empty() && first_seq > self.replay_from.max(1) {
            // The oldest file: nothing before it can hold the records from replay_from.
            return Err(Error::corrupt(
                path,
                8,
                format!(
                    "the oldest commit log file starts at sequence number {first_seq}, but \
                     replay must start at {} (the lowest not in a flushed segment): records \
                     {} to {} are missing (an older commit log file deleted?)",
                    self.replay_from,
                    self.replay_from,
                    first_seq - 1
                ),
            ));
        }
        let Some(stop) = self.pending_stop.take() else {
            return self.check_clean_end(path, first_seq);
        };
        if stop.expected_seq == Some(first_seq) {
            tracing::info!(
                file = %stop.path.display(),
                "the stop in {} is an old torn tail: the next file continues at sequence number {first_seq}",
                stop.path.display()
            );
            return Ok(());
        }
        let from = stop
            .expected_seq
            .map_or("an unknown number".to_string(), |e| e.to_string());
        if first_seq > self.replay_from {
            return Err(Error::corrupt(
                &stop.path,
                stop.offset,
                format!(
                    "{}; records from sequence number {from} up to {} are missing, and the next file {} does not repeat them",
                    stop.reason,
                    first_seq - 1,
                    path.display()
                ),
            ));
        }
        tracing::warn!(
            file = %stop.path.display(),
            "records from sequence number {from} in {} are lost but were flushed already (replay starts at {})",
            stop.path.display(),
            self.replay_from
        );
        Ok(())
    }

    /// The previous file ended cleanly (at a record boundary, no stop): if the next
    /// file starts beyond where it ended, records were lost from its end (a file
    /// truncated at a record boundary). Like a stop, an error only if some of the missing
    /// numbers are not in a flushed segment (a new log starts at `replay_from` when that
    /// is higher than the last record: no loss).
    fn check_clean_end(&self, path: &Path, first_seq: u64) -> Result<()> {
        let (Some(r), Some(prev)) = (self.out.resume_seq, self.out.files.last()) else {
            return Ok(());
        };
        if first_seq > r && first_seq > self.replay_from {
            let len = std::fs::metadata(&prev.path).map_or(0, |m| m.len());
            return Err(Error::corrupt(
                &prev.path,
                len,
                format!(
                    "file ends at sequence number {}, but the next file {} starts at {first_seq}: records {r} to {} are missing (truncated file?)",
                    r.saturating_sub(1),
                    path.display(),
                    first_seq - 1
                ),
            ));
        }
        Ok(())
    }

    /// Start file `idx`: read its header and set up the cursor (or skip or stop).
    fn start_file(&mut self) -> Result<()> {
        let (id, path) = self.files[self.idx].clone();
        let (header, file, len) = read_header(&path)?;
        let (first_seq, layout) = match header {
            Ok(h) => (h.first_seq, h.layout),
            Err(m) => {
                let expected = self.out.resume_seq;
                self.out.files.push(LogFileInfo {
                    id,
                    path: path.clone(),
                    first_seq: expected.unwrap_or(0),
                });
                self.stop(path, m.offset, m.reason, expected);
                return Ok(());
            }
        };
        self.settle(&path, first_seq)?;
        self.out.files.push(LogFileInfo {
            id,
            path: path.clone(),
            first_seq,
        });
        self.out.resume_seq = Some(first_seq);
        let next_first = self.headers.get(self.idx + 1).copied().flatten();
        if next_first.is_some_and(|n| n <= self.replay_from) {
            // Every record here is below replay_from: flushed already.
            self.out.resume_seq = next_first;
            self.idx += 1;
            return Ok(());
        }
        self.cur = Some(Cursor {
            reader: BufReader::with_capacity(1 << 16, file),
            path,
            len,
            pos: FILE_HEADER_LEN as u64,
            expected: first_seq,
            layout,
        });
        Ok(())
    }

    fn next_record(&mut self) -> Result<Option<LogRecord>> {
        loop {
            if self.cur.is_none() {
                if self.idx >= self.files.len() {
                    return Ok(None);
                }
                self.start_file()?;
                continue;
            }
            let c = self.cur.as_mut().expect("checked above");
            if c.pos == c.len {
                self.cur = None;
                self.idx += 1;
                continue;
            }
            let (pos, expected) = (c.pos, c.expected);
            match read_frame(c) {
                Ok((rec, used)) if rec.seq == expected => {
                    c.pos += used;
                    c.expected += 1;
                    self.out.resume_seq = Some(c.expected);
                    if rec.seq >= self.replay_from {
                        self.out.records += 1;
                        return Ok(Some(rec));
                    }
                }
                Ok((rec, _)) => {
                    let path = c.path.clone();
                    let reason = format!(
                        "record carries sequence number {} where {expected} was expected",
                        rec.seq
                    );
                    self.stop(path, pos, reason, Some(expected));
                }
                Err(Frame::Bad(offset, reason)) => {
                    let path = c.path.clone();
                    self.stop(path, offset, reason, Some(expected));
                }
                Err(Frame::Io(e)) => return Err(e),
            }
        }
    }
}

impl Iterator for Replay {
    type Item = Result<LogRecord>;

    fn next(&mut self) -> Option<Self::Item> {
        if self.done {
            return None;
        }
        match self.next_record() {
            Ok(Some(r)) => Some(Ok(r)),
            Ok(None) => {
                self.done = true;
                None
            }
            Err(e) => {
                self.done = true;
                Some(Err(e))
            }
        }
    }
}

enum Frame {
    /// Bad bytes at this file offset.
    Bad(u64, String),
    Io(Error),
}

/// Read one frame at the cursor: the record and the bytes its frame takes (the cursor's
/// position is advanced by the caller).
fn read_frame(c: &mut Cursor) -> std::result::Result<(LogRecord, u64), Frame> {
    let pos = c.pos;
    let remaining = c.len - pos;
    if remaining < FRAME_HEADER_LEN as u64 {
        return Err(Frame::Bad(
            pos,
            format!("record header truncated to {remaining} bytes (torn write)"),
        ));
    }
    let mut h = [0u8; FRAME_HEADER_LEN];
    c.reader
        .read_exact(&mut h)
        .map_err(|e| Frame::Io(Error::io("read", &c.path, e)))?;
    let len = format::body_len(&h).map_err(|m| Frame::Bad(pos, m.reason))?;
    if len as u64 > remaining - FRAME_HEADER_LEN as u64 {
        return Err(Frame::Bad(
            pos,
            format!(
                "record of {len} bytes passes the end of the file ({} bytes left; torn write)",
                remaining - FRAME_HEADER_LEN as u64
            ),
        ));
    }
    let mut body = vec![0u8; len];
    c.reader
        .read_exact(&mut body)
        .map_err(|e| Frame::Io(Error::io("read", &c.path, e)))?;
    let rec = format::decode_record(&h, &body, c.layout)
        .map_err(|m| Frame::Bad(pos + m.offset, m.reason))?;
    Ok((rec, (FRAME_HEADER_LEN + len) as u64))
}

/// Open a file and read its header: (decoded header, the file positioned after the
/// header, the file length).
fn read_header(
    path: &Path,
) -> Result<(
    std::result::Result<format::FileHeader, crate::format::Malformed>,
    File,
    u64,
)> {
    let mut f = File::open(path).map_err(|e| Error::io("open", path, e))?;
    let len = f.metadata().map_err(|e| Error::io("stat", path, e))?.len();
    let mut h = Vec::with_capacity(FILE_HEADER_LEN);
    (&mut f)
        .take(FILE_HEADER_LEN as u64)
        .read_to_end(&mut h)
        .map_err(|e| Error::io("read", path, e))?;
    Ok((format::decode_file_header(&h), f, len))
}
