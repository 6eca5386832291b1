//! Without the `testing` feature there is no Windows emulation, no fault injector and no
//! power-loss simulator. These uninhabited stand-ins keep the I/O boundary one shape:
//! [`super::FileRules`] holds `Option`s of them that are always `None`, and every branch
//! on `Some(..)` is code the compiler removes.

pub(crate) mod emulation {
    use std::io;
    use std::path::Path;

    use crate::io::rules::FileOp;

    #[derive(Debug)]
    pub(crate) enum WindowsEmulation {}

    impl WindowsEmulation {
        pub(crate) fn check(&self, _op: FileOp, _path: &Path) -> io::Result<()> {
            match *self {}
        }
    }
}

pub(crate) mod faults {
    use std::io;
    use std::path::Path;

    #[derive(Debug)]
    pub(crate) enum Faults {}

    impl Faults {
        pub(crate) fn rename(&self, _from: &Path, _to: &Path) -> io::Result<()> {
            match *self {}
        }
        pub(crate) fn fsync(&self, _path: &Path) -> io::Result<()> {
            match *self {}
        }
        pub(crate) fn dir_fsync(&self, _dir: &Path) -> io::Result<()> {
            match *self {}
        }
        pub(crate) fn write(&self, _path: &Path, _len: usize) -> Option<(usize, io::Error)> {
            match *self {}
        }
        pub(crate) fn link(&self, _dst: &Path) -> io::Result<()> {
            match *self {}
        }
        pub(crate) fn delete(&self, _path: &Path) -> io::Result<()> {
            match *self {}
        }
        pub(crate) fn point(&self, _point: &str, _path: &Path) {
            match *self {}
        }
    }
}

pub(crate) mod powerloss {
    use std::fs::File;
    use std::io;
    use std::path::Path;

    use crate::io::fs::NameOp;

    #[derive(Debug, Clone)]
    pub(crate) enum PowerLoss {}

    impl PowerLoss {
        pub(crate) fn admit(&self, _what: &str, _path: &Path) -> io::Result<()> {
            match *self {}
        }
        pub(crate) fn run<T>(
            &self,
            _what: &str,
            _path: &Path,
            _op: impl FnOnce() -> io::Result<T>,
            _rec: impl FnOnce(&T) -> Option<NameOp>,
        ) -> io::Result<T> {
            match *self {}
        }
        pub(crate) fn track_new(&self, _file: &File, _path: &Path) {
            match *self {}
        }
        pub(crate) fn sync_file(
            &self,
            _file: &File,
            _path: &Path,
            _op: impl FnOnce() -> io::Result<()>,
        ) -> io::Result<()> {
            match *self {}
        }
        pub(crate) fn fsync_dir(
            &self,
            _dir: &Path,
            _op: impl FnOnce() -> io::Result<()>,
        ) -> io::Result<()> {
            match *self {}
        }
        pub(crate) fn rename(&self, _from: &Path, _to: &Path, _replacing: bool) -> io::Result<()> {
            match *self {}
        }
        pub(crate) fn unlink(&self, _path: &Path) -> io::Result<()> {
            match *self {}
        }
    }
}
