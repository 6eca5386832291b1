//! [`SnapshotData`]: a snapshot's files as one byte stream, which openraft sends in
//! chunks (`AsyncRead` + `AsyncSeek` on the leader, `AsyncWrite` + `AsyncSeek` on the
//! follower).
//!
//! The stream: the 8 bytes `SEGRAFT1`, a header length (u64, little-endian), the header
//! (JSON: each file's name and length, in order), then the files' bytes one after the
//! other. Nothing is serialised but the header: the leader reads the snapshot's
//! hard-linked segment files where they are, the follower writes each file as its bytes
//! arrive, through the crate's file boundary, and fsyncs it when it is complete.
//!
//! Chunks arrive in order; openraft resends a chunk whose answer was lost, so a seek
//! back to an offset already written is accepted and the bytes up to where the stream
//! had got are skipped (a snapshot's bytes never change for its id). A seek past the
//! end of what was received is an error.

use std::fs::File;
use std::io::{self, Read, Seek, SeekFrom};
use std::path::PathBuf;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use serde::{Deserialize, Serialize};
use tokio::io::{AsyncRead, AsyncSeek, AsyncWrite, ReadBuf};

use crate::dirs::SnapDir;
use crate::error::{Error, Result};
use crate::fs::{Fs, FsFile};

const MAGIC: &[u8; 8] = b"SEGRAFT1";
/// A header larger than this is refused (a million files' names).
const MAX_HEADER: u64 = 64 << 20;

#[derive(Debug, Clone, Serialize, Deserialize)]
struct Header {
    files: Vec<(String, u64)>,
}

/// May `name` be a file of a snapshot? A plain file name of a store (no separator, no
/// `..`), so a stream cannot write outside its directory.
pub(crate) fn valid_name(name: &str) -> bool {
    !name.is_empty()
        && name.len() <= 255
        && name != "."
        && name != ".."
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"_-.".contains(&b))
}

fn encode_header(h: &Header) -> Vec<u8> {
    let json = serde_json::to_vec(h).expect("a header serialises");
    let mut out = Vec::with_capacity(16 + json.len());
    out.extend_from_slice(MAGIC);
    out.extend_from_slice(&(json.len() as u64).to_le_bytes());
    out.extend_from_slice(&json);
    out
}

/// A snapshot as openraft holds it: the stream of a snapshot directory being read, or
/// one being received into a staging directory.
///
/// The stream: the 8 bytes `SEGRAFT1`, a header length (u64, little-endian), the
/// header (JSON: each file's name and length, in order), then the files' bytes one
/// after the other. Only the header is serialised: the sender reads the snapshot's
/// hard-linked segment files where they are, the receiver writes each file as its
/// bytes arrive and fsyncs it once complete. A seek back (a resent chunk) skips the
/// bytes already written, which a snapshot's id guarantees are the same; a seek past
/// what was received, a bad header or a file name that is not a store file's is an
/// error naming it, and the staging directory is removed.
pub struct SnapshotData {
    inner: Inner,
}

enum Inner {
    Reader(Reader),
    Writer(Writer),
}

impl std::fmt::Debug for SnapshotData {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match &self.inner {
            Inner::Reader(r) => write!(f, "SnapshotData(reading {})", r.snap.path().display()),
            Inner::Writer(w) => write!(f, "SnapshotData(receiving into {})", w.dir.display()),
        }
    }
}

impl SnapshotData {
    pub(crate) fn reader(snap: Arc<SnapDir>) -> Result<SnapshotData> {
        Ok(SnapshotData {
            inner: Inner::Reader(Reader::new(snap)?),
        })
    }

    pub(crate) fn writer(fs: Fs, dir: PathBuf) -> SnapshotData {
        SnapshotData {
            inner: Inner::Writer(Writer::new(fs, dir)),
        }
    }

    /// The received stream's files, complete and fsynced, in its staging directory
    /// (`store/` under it); a stream being read is copied into `staging` first.
    pub(crate) fn into_received(
        self,
        fs: &Fs,
        staging: impl FnOnce() -> Result<PathBuf>,
    ) -> Result<PathBuf> {
        match self.inner {
            Inner::Writer(w) => w.finish(),
            Inner::Reader(mut r) => {
                let mut w = Writer::new(fs.clone(), staging()?);
                let mut buf = vec![0; 1 << 20];
                loop {
                    let n = r
                        .read(&mut buf)
                        .map_err(|e| Error::io("read snapshot", r.snap.path(), e))?;
                    if n == 0 {
                        break;
                    }
                    w.accept(&buf[..n])?;
                }
                w.finish()
            }
        }
    }

    /// Total length of a stream being read.
    pub fn len(&self) -> Option<u64> {
        match &self.inner {
            Inner::Reader(r) => Some(r.total),
            Inner::Writer(_) => None,
        }
    }

    /// True for an empty stream being read (never: every stream has a header).
    pub fn is_empty(&self) -> bool {
        self.len() == Some(0)
    }
}

/// Reads a snapshot directory's files as the stream.
struct Reader {
    snap: Arc<SnapDir>,
    header: Vec<u8>,
    /// (path, start offset in the stream, length).
    files: Vec<(PathBuf, u64, u64)>,
    total: u64,
    pos: u64,
    open: Option<(usize, File)>,
}

impl Reader {
    fn new(snap: Arc<SnapDir>) -> Result<Reader> {
        let listed = snap.store_files()?;
        let header = encode_header(&Header {
            files: listed.clone(),
        });
        let mut files = Vec::new();
        let mut at = header.len() as u64;
        for (name, len) in listed {
            files.push((snap.store_dir().join(&name), at, len));
            at += len;
        }
        Ok(Reader {
            header,
            snap,
            files,
            total: at,
            pos: 0,
            open: None,
        })
    }

    fn file(&mut self, i: usize) -> io::Result<&mut File> {
        if self.open.as_ref().map(|(j, _)| *j) != Some(i) {
            self.open = Some((i, File::open(&self.files[i].0)?));
        }
        Ok(&mut self.open.as_mut().expect("just opened").1)
    }
}

impl Read for Reader {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        if self.pos >= self.total || buf.is_empty() {
            return Ok(0);
        }
        let hl = self.header.len() as u64;
        if self.pos < hl {
            let from = self.pos as usize;
            let n = buf.len().min(self.header.len() - from);
            buf[..n].copy_from_slice(&self.header[from..from + n]);
            self.pos += n as u64;
            return Ok(n);
        }
        let i = self
            .files
            .partition_point(|(_, start, len)| start + len <= self.pos);
        let (start, len) = (self.files[i].1, self.files[i].2);
        let off = self.pos - start;
        let want = buf.len().min((len - off) as usize);
        let f = self.file(i)?;
        f.seek(SeekFrom::Start(off))?;
        let n = f.read(&mut buf[..want])?;
        if n == 0 {
            return Err(io::Error::new(
                io::ErrorKind::UnexpectedEof,
                format!(
                    "snapshot file {} is shorter than listed",
                    self.files[i].0.display()
                ),
            ));
        }
        self.pos += n as u64;
        Ok(n)
    }
}

/// Receives the stream into `dir/store/`.
struct Writer {
    fs: Fs,
    dir: PathBuf,
    /// Bytes of the stream accepted so far.
    pos: u64,
    /// Bytes to drop before accepting more (a resent chunk's part already written).
    skip: u64,
    head: Vec<u8>,
    header: Option<Header>,
    /// Index of the file being written, bytes written in it, and the file.
    current: Option<(usize, u64, FsFile)>,
    next_file: usize,
    finished: bool,
    failed: Option<String>,
}

impl Writer {
    fn new(fs: Fs, dir: PathBuf) -> Writer {
        Writer {
            fs,
            dir,
            pos: 0,
            skip: 0,
            head: Vec::new(),
            header: None,
            current: None,
            next_file: 0,
            finished: false,
            failed: None,
        }
    }

    fn store_dir(&self) -> PathBuf {
        self.dir.join(crate::dirs::SNAP_STORE)
    }

    fn refuse(&mut self, why: String) -> Error {
        self.failed = Some(why.clone());
        Error::Snapshot(why)
    }

    /// Take the next bytes of the stream.
    fn accept(&mut self, mut bytes: &[u8]) -> Result<()> {
        if let Some(why) = &self.failed {
            return Err(Error::Snapshot(why.clone()));
        }
        let drop = (self.skip as usize).min(bytes.len());
        self.skip -= drop as u64;
        bytes = &bytes[drop..];
        while !bytes.is_empty() {
            let n = if self.header.is_none() {
                self.accept_head(bytes)?
            } else {
                self.accept_file(bytes)?
            };
            bytes = &bytes[n..];
            self.pos += n as u64;
        }
        if self.header.is_some() {
            self.open_next()?; // files of length 0 after the last bytes
        }
        Ok(())
    }

    fn accept_head(&mut self, bytes: &[u8]) -> Result<usize> {
        let want = if self.head.len() < 16 {
            16
        } else {
            16 + self.header_len() as usize
        };
        let n = (want - self.head.len()).min(bytes.len());
        self.head.extend_from_slice(&bytes[..n]);
        if self.head.len() == 16 && (&self.head[..8] != MAGIC || self.header_len() > MAX_HEADER) {
            return Err(self.refuse(
                "not a segstore-raft snapshot stream (bad magic or header length)".into(),
            ));
        }
        if self.head.len() >= 16 && self.head.len() as u64 == 16 + self.header_len() {
            self.parse_head()?;
        }
        Ok(n)
    }

    fn header_len(&self) -> u64 {
        u64::from_le_bytes(self.head[8..16].try_into().expect("8 bytes"))
    }

    fn parse_head(&mut self) -> Result<()> {
        let h: Header = serde_json::from_slice(&self.head[16..])
            .map_err(|e| self.refuse(format!("header does not decode: {e}")))?;
        if let Some((bad, _)) = h.files.iter().find(|(n, _)| !valid_name(n)) {
            let bad = bad.clone();
            return Err(self.refuse(format!("file name {bad:?} is not a store file's")));
        }
        self.fs
            .create_dir(&self.dir)
            .and_then(|()| self.fs.create_dir(&self.store_dir()))
            .map_err(|e| Error::io("create snapshot staging directory", &self.dir, e))?;
        self.header = Some(h);
        self.open_next()
    }

    /// Open the next file once the current one is complete; fsync completed ones.
    fn open_next(&mut self) -> Result<()> {
        let files = &self.header.as_ref().expect("header parsed").files;
        loop {
            if let Some((i, written, f)) = &self.current {
                if *written < files[*i].1 {
                    return Ok(());
                }
                f.sync_all().map_err(|e| Error::io("fsync", f.path(), e))?;
                self.current = None;
            }
            if self.next_file >= files.len() {
                return Ok(());
            }
            let path = self.store_dir().join(&files[self.next_file].0);
            let f = self
                .fs
                .create_new(&path)
                .map_err(|e| Error::io("create", &path, e))?;
            self.current = Some((self.next_file, 0, f));
            self.next_file += 1;
        }
    }

    fn accept_file(&mut self, bytes: &[u8]) -> Result<usize> {
        self.open_next()?;
        let files = &self.header.as_ref().expect("header parsed").files;
        let Some((i, written, f)) = &mut self.current else {
            return Err(self.refuse("bytes past the end of the stream".into()));
        };
        let n = bytes.len().min((files[*i].1 - *written) as usize);
        f.append(&bytes[..n])
            .map_err(|e| Error::io("write", f.path(), e))?;
        *written += n as u64;
        Ok(n)
    }

    fn seek(&mut self, to: u64) -> Result<u64> {
        let at = self.pos;
        if to > at {
            return Err(self.refuse(format!("seek to {to} past the {at} bytes received")));
        }
        // Bytes from `to` up to `pos` were written already; drop them when resent.
        self.skip = at - to;
        Ok(to)
    }

    /// Every file complete and fsynced, the directories fsynced.
    fn finish(mut self) -> Result<PathBuf> {
        if let Some(why) = &self.failed {
            return Err(Error::Snapshot(why.clone()));
        }
        if self.header.is_none() {
            return Err(self.refuse("the stream ended inside its header".into()));
        }
        self.open_next()?;
        let left = self.header.as_ref().expect("parsed").files.len() - self.next_file;
        if self.current.is_some() || left > 0 {
            return Err(self.refuse("the stream ended before its last file".into()));
        }
        let store_dir = self.store_dir();
        self.fs
            .fsync_dir(&store_dir)
            .map_err(|e| Error::io("fsync dir", &store_dir, e))?;
        self.finished = true;
        Ok(std::mem::take(&mut self.dir))
    }
}

impl Drop for Writer {
    fn drop(&mut self) {
        if !self.finished && self.dir.exists() {
            self.current = None;
            if let Err(e) = self.fs.remove_tree(&self.dir) {
                tracing::info!(dir = %self.dir.display(), error = %e, "abandoned snapshot staging directory left for the next open");
            }
        }
    }
}

fn unsupported(what: &str) -> io::Error {
    io::Error::new(
        io::ErrorKind::Unsupported,
        format!("{what} on this snapshot stream"),
    )
}

impl AsyncRead for SnapshotData {
    fn poll_read(
        self: Pin<&mut Self>,
        _: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let Inner::Reader(r) = &mut self.get_mut().inner else {
            return Poll::Ready(Err(unsupported("read")));
        };
        let n = r.read(buf.initialize_unfilled())?;
        buf.advance(n);
        Poll::Ready(Ok(()))
    }
}

impl AsyncWrite for SnapshotData {
    fn poll_write(
        self: Pin<&mut Self>,
        _: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        let Inner::Writer(w) = &mut self.get_mut().inner else {
            return Poll::Ready(Err(unsupported("write")));
        };
        Poll::Ready(w.accept(buf).map(|()| buf.len()).map_err(Error::into_io))
    }

    fn poll_flush(self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<io::Result<()>> {
        Poll::Ready(Ok(()))
    }

    fn poll_shutdown(self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<io::Result<()>> {
        Poll::Ready(Ok(()))
    }
}

impl AsyncSeek for SnapshotData {
    fn start_seek(self: Pin<&mut Self>, to: SeekFrom) -> io::Result<()> {
        match &mut self.get_mut().inner {
            Inner::Reader(r) => {
                let target = match to {
                    SeekFrom::Start(o) => Some(o),
                    SeekFrom::End(d) => r.total.checked_add_signed(d),
                    SeekFrom::Current(d) => r.pos.checked_add_signed(d),
                };
                r.pos = target.ok_or_else(|| {
                    io::Error::new(io::ErrorKind::InvalidInput, "seek before the start")
                })?;
                Ok(())
            }
            Inner::Writer(w) => {
                let target = match to {
                    SeekFrom::Start(o) => o,
                    SeekFrom::Current(0) => w.pos - w.skip,
                    _ => return Err(unsupported("seek from the end or by an offset")),
                };
                w.seek(target).map(|_| ()).map_err(Error::into_io)
            }
        }
    }

    fn poll_complete(self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<io::Result<u64>> {
        Poll::Ready(Ok(match &self.inner {
            Inner::Reader(r) => r.pos,
            Inner::Writer(w) => w.pos - w.skip,
        }))
    }
}
