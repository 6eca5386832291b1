//! zstd for data blocks: one compression and one decompression context per thread,
//! reused, since a context costs an allocation of hundreds of KiB and its setup, which
//! a block of 4 KiB would pay at every write and read otherwise.

use std::cell::RefCell;

use zstd::bulk::{Compressor, Decompressor};

/// The level blocks are written at: zstd's default, RocksDB's default too.
pub const LEVEL: i32 = 3;

thread_local! {
    static COMPRESSOR: RefCell<Option<Compressor<'static>>> = const { RefCell::new(None) };
    static DECOMPRESSOR: RefCell<Option<Decompressor<'static>>> = const { RefCell::new(None) };
}

/// Compress `payload` into `out` (replacing what it held); `false` when zstd failed.
pub fn compress(payload: &[u8], out: &mut Vec<u8>) -> bool {
    COMPRESSOR.with(|c| {
        let mut c = c.borrow_mut();
        let c = match &mut *c {
            Some(c) => c,
            None => match Compressor::new(LEVEL) {
                Ok(new) => c.insert(new),
                Err(_) => return false,
            },
        };
        out.clear();
        out.reserve(zstd::zstd_safe::compress_bound(payload.len()));
        c.compress_to_buffer(payload, out).is_ok()
    })
}

/// Decompress `b` into `out`, which holds exactly the bytes it should decompress to;
/// returns how many it did.
pub fn decompress(b: &[u8], out: &mut [u8]) -> Result<usize, String> {
    DECOMPRESSOR.with(|d| {
        let mut d = d.borrow_mut();
        let d = match &mut *d {
            Some(d) => d,
            None => d.insert(Decompressor::new().map_err(|e| e.to_string())?),
        };
        d.decompress_to_buffer(b, out).map_err(|e| e.to_string())
    })
}
