//! Platform differences behind identical function signatures.
//!
//! Unix (`unix.rs`) is built and tested here. Windows (`windows.rs`) is kept tiny, behind
//! `#[cfg(windows)]`, and is **not compiled or tested** in this project's CI.

#[cfg(unix)]
mod unix;
#[cfg(unix)]
pub use unix::*;

#[cfg(windows)]
mod windows;
#[cfg(windows)]
pub use windows::*;

/// True when the OS itself forbids deleting a mapped file (Windows).
pub const OS_FORBIDS_DELETING_MAPPED: bool = cfg!(windows);
