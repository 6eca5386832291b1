//! Capturing what `tracing` logs, for tests that check a warning was (or was not)
//! written.

use std::sync::{Arc, Mutex};

/// A `tracing` writer that keeps what is logged.
#[derive(Clone, Default)]
struct Captured(Arc<Mutex<Vec<u8>>>);

impl std::io::Write for Captured {
    fn write(&mut self, b: &[u8]) -> std::io::Result<usize> {
        self.0.lock().unwrap().extend_from_slice(b);
        Ok(b.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

/// Run `f` with the log captured (this thread's, every level the default subscriber
/// writes); returns `f`'s result and the text logged.
pub fn with_log<T>(f: impl FnOnce() -> T) -> (T, String) {
    let log = Captured::default();
    let sink = log.clone();
    let sub = tracing_subscriber::fmt()
        .with_writer(move || sink.clone())
        .with_ansi(false)
        .finish();
    let out = tracing::subscriber::with_default(sub, f);
    let text = String::from_utf8(log.0.lock().unwrap().clone()).unwrap();
    (out, text)
}
