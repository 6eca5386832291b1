//! Commit log settings: the sync mode (`commitlog_sync`) and the file size at which the
//! log rolls to a new file.
//!
//! | mode | acknowledged | durable after |
//! | --- | --- | --- |
//! | `periodic { period }` (default, `10s`) | at once, after the write reaches the OS | the next periodic fsync (a power loss can lose up to one period) |
//! | `batch` | after an fsync covering the write | the acknowledgement |
//! | `group { window }` | after the fsync that closes a window of `window` (e.g. `100us`) | the acknowledgement |
//!
//! In a configuration file the modes are spelled (TOML):
//! `sync = "batch"`, `sync = { periodic = { period = "10s" } }`,
//! `sync = { group = { window = "100us" } }`: both durations are text with a unit
//! ([`duration_text`]: `ns`, `us`, `ms` or `s`). The period must be a whole number of
//! milliseconds. For compatibility `{ periodic = { period_ms = 10000 } }` (a bare number
//! of milliseconds, the spelling before durations were text) is still read; giving both
//! `period` and `period_ms` is an error, giving neither means the default. Serialising
//! writes `period`. On a command line, [`CommitLogSync`]'s `FromStr` takes `batch`,
//! `periodic`, `periodic:<duration>`, `group` or `group:<duration>`; its `Display`
//! prints the same form (`periodic:10s`, `group:100us`).

use std::fmt;
use std::str::FromStr;
use std::time::Duration;

use serde::{Deserialize, Serialize};

use crate::error::{Error, Result};

/// Default period of `periodic` mode (Cassandra's `commitlog_sync_period`).
pub const DEFAULT_PERIOD_MS: u64 = 10_000;
/// Default window of `group` mode.
pub const DEFAULT_GROUP_WINDOW: Duration = Duration::from_millis(1);
/// Default size at which the log rolls to a new file (Cassandra's 32 MiB).
pub const DEFAULT_SEGMENT_SIZE: u64 = 32 * 1024 * 1024;

/// The valid spellings, for error messages.
pub const COMMITLOG_SYNC_VALUES: &str =
    "batch, periodic, periodic:<duration>, group, group:<duration> (durations like 10000ms or 100us)";

/// When an append is acknowledged relative to the fsync that makes it durable. See the
/// module docs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(try_from = "SyncText", into = "SyncText")]
pub enum CommitLogSync {
    /// Acknowledge at once; a background thread fsyncs every `period_ms` milliseconds.
    /// In a configuration file: `{ periodic = { period = "10s" } }` (or, as before,
    /// `period_ms = 10000`).
    Periodic {
        /// Milliseconds between fsyncs (at least 1).
        period_ms: u64,
    },
    /// Acknowledge after an fsync that covers the write. Writers that arrive while an
    /// fsync is running share the next one, without waiting for a window.
    Batch,
    /// Acknowledge after the fsync that closes a window: the first writer to find no
    /// fsync pending becomes the leader, waits `window` for others to append, then
    /// fsyncs once for all of them.
    Group {
        /// How long the leader collects writers before the fsync (sub-millisecond
        /// values are honoured).
        window: Duration,
    },
}

/// The configuration-file form of [`CommitLogSync`] (module docs): durations as text,
/// `period_ms` still read.
#[derive(Serialize, Deserialize)]
#[serde(rename_all = "snake_case", deny_unknown_fields)]
enum SyncText {
    Periodic(PeriodText),
    Batch,
    Group {
        #[serde(with = "duration_text")]
        window: Duration,
    },
}

#[derive(Default, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
struct PeriodText {
    #[serde(skip_serializing_if = "Option::is_none")]
    period: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    period_ms: Option<u64>,
}

impl TryFrom<SyncText> for CommitLogSync {
    type Error = String;

    fn try_from(t: SyncText) -> std::result::Result<Self, String> {
        Ok(match t {
            SyncText::Batch => CommitLogSync::Batch,
            SyncText::Group { window } => CommitLogSync::Group { window },
            SyncText::Periodic(p) => {
                match (p.period, p.period_ms) {
                    (Some(_), Some(_)) => return Err(
                        "periodic: give `period` (e.g. \"10s\") or the older `period_ms`, not both"
                            .into(),
                    ),
                    (None, None) => CommitLogSync::default(),
                    (None, Some(period_ms)) => CommitLogSync::Periodic { period_ms },
                    (Some(text), None) => CommitLogSync::Periodic {
                        period_ms: period_millis(&text)?,
                    },
                }
            }
        })
    }
}

impl From<CommitLogSync> for SyncText {
    fn from(s: CommitLogSync) -> SyncText {
        match s {
            CommitLogSync::Batch => SyncText::Batch,
            CommitLogSync::Group { window } => SyncText::Group { window },
            CommitLogSync::Periodic { period_ms } => SyncText::Periodic(PeriodText {
                period: Some(duration_text::format(Duration::from_millis(period_ms))),
                period_ms: None,
            }),
        }
    }
}

/// A period's text as whole milliseconds.
fn period_millis(text: &str) -> std::result::Result<u64, String> {
    let d = duration_text::parse(text)?;
    if d.subsec_nanos() % 1_000_000 != 0 {
        return Err(format!(
            "period {text:?}: the period must be a whole number of milliseconds"
        ));
    }
    u64::try_from(d.as_millis()).map_err(|_| format!("period {text:?} out of range"))
}

impl Default for CommitLogSync {
    fn default() -> Self {
        CommitLogSync::Periodic {
            period_ms: DEFAULT_PERIOD_MS,
        }
    }
}

impl CommitLogSync {
    /// Check the values, naming the bad one.
    pub fn validate(&self) -> Result<()> {
        match *self {
            CommitLogSync::Periodic { period_ms: 0 } => Err(Error::InvalidConfig {
                setting: "commitlog_sync",
                value: self.to_string(),
                reason: "the period must be at least 1 ms".into(),
            }),
            CommitLogSync::Group { window } if window > Duration::from_secs(10) => {
                Err(Error::InvalidConfig {
                    setting: "commitlog_sync",
                    value: self.to_string(),
                    reason: "the group window must be at most 10 s".into(),
                })
            }
            _ => Ok(()),
        }
    }
}

impl fmt::Display for CommitLogSync {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            CommitLogSync::Periodic { period_ms } => write!(
                f,
                "periodic:{}",
                duration_text::format(Duration::from_millis(*period_ms))
            ),
            CommitLogSync::Batch => f.write_str("batch"),
            CommitLogSync::Group { window } => {
                write!(f, "group:{}", duration_text::format(*window))
            }
        }
    }
}

impl FromStr for CommitLogSync {
    type Err = Error;

    fn from_str(s: &str) -> Result<Self> {
        let s = s.trim();
        let bad = |reason: String| Error::InvalidConfig {
            setting: "commitlog_sync",
            value: s.to_string(),
            reason,
        };
        let (mode, arg) = match s.split_once(':') {
            Some((m, a)) => (m, Some(a)),
            None => (s, None),
        };
        let parse_arg = |a: &str| {
            duration_text::parse(a)
                .map_err(|e| bad(format!("{e}; valid values are {COMMITLOG_SYNC_VALUES}")))
        };
        let sync = match (mode, arg) {
            ("batch", None) => CommitLogSync::Batch,
            ("periodic", None) => CommitLogSync::default(),
            ("periodic", Some(a)) => {
                parse_arg(a)?;
                CommitLogSync::Periodic {
                    period_ms: period_millis(a).map_err(bad)?,
                }
            }
            ("group", None) => CommitLogSync::Group {
                window: DEFAULT_GROUP_WINDOW,
            },
            ("group", Some(a)) => CommitLogSync::Group {
                window: parse_arg(a)?,
            },
            _ => return Err(bad(format!("valid values are {COMMITLOG_SYNC_VALUES}"))),
        };
        sync.validate()?;
        Ok(sync)
    }
}

/// Settings of one commit log.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
#[non_exhaustive]
pub struct CommitLogConfig {
    /// The sync mode.
    pub sync: CommitLogSync,
    /// Roll to a new file once the current one would pass this many bytes (a single
    /// larger record gets a file of its own). At least 64.
    pub segment_size: u64,
}

impl Default for CommitLogConfig {
    fn default() -> Self {
        CommitLogConfig {
            sync: CommitLogSync::default(),
            segment_size: DEFAULT_SEGMENT_SIZE,
        }
    }
}

impl CommitLogConfig {
    /// Check the settings, naming the bad one.
    pub fn validate(&self) -> Result<()> {
        self.sync.validate()?;
        if self.segment_size < 64 {
            return Err(Error::InvalidConfig {
                setting: "commitlog_segment_size",
                value: self.segment_size.to_string(),
                reason: "must be at least 64 bytes".into(),
            });
        }
        Ok(())
    }
}

/// Durations as text with a unit: `100us`, `1.5ms`, `2s`, `250ns`, `10m`, `1h`, `10d`
/// (`µs` is accepted for `us`; `m` is minutes). Serialized in the largest unit up to
/// seconds that represents the value exactly.
pub mod duration_text {
    use std::time::Duration;

    use serde::{Deserialize, Deserializer, Serializer};

    /// The units [`parse`] takes.
    pub const UNITS: &str = "ns, us, ms, s, m, h, d";

    /// Parse `<number><unit>`.
    pub fn parse(s: &str) -> std::result::Result<Duration, String> {
        let s = s.trim();
        let split = s
            .find(|c: char| !(c.is_ascii_digit() || c == '.'))
            .ok_or_else(|| format!("duration {s:?} has no unit ({UNITS})"))?;
        let (num, unit) = s.split_at(split);
        let nanos_per: f64 = match unit.trim() {
            "ns" => 1.0,
            "us" | "µs" => 1e3,
            "ms" => 1e6,
            "s" => 1e9,
            "m" => 60e9,
            "h" => 3600e9,
            "d" => 86400e9,
            u => return Err(format!("unknown duration unit {u:?} ({UNITS})")),
        };
        let n: f64 = num
            .parse()
            .map_err(|_| format!("bad number {num:?} in duration {s:?}"))?;
        let nanos = (n * nanos_per).round();
        if !nanos.is_finite() || nanos < 0.0 || nanos > u64::MAX as f64 {
            return Err(format!("duration {s:?} out of range"));
        }
        Ok(Duration::from_nanos(nanos as u64))
    }

    /// Format in the largest exact unit.
    pub fn format(d: Duration) -> String {
        let n = d.as_nanos();
        if n == 0 {
            "0us".into()
        } else if n % 1_000_000_000 == 0 {
            format!("{}s", n / 1_000_000_000)
        } else if n % 1_000_000 == 0 {
            format!("{}ms", n / 1_000_000)
        } else if n % 1_000 == 0 {
            format!("{}us", n / 1_000)
        } else {
            format!("{n}ns")
        }
    }

    /// Serde: serialize.
    pub fn serialize<S: Serializer>(d: &Duration, s: S) -> std::result::Result<S::Ok, S::Error> {
        s.serialize_str(&format(*d))
    }

    /// Serde: deserialize.
    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> std::result::Result<Duration, D::Error> {
        let s = String::deserialize(d)?;
        parse(&s).map_err(serde::de::Error::custom)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn from_str_accepts_every_mode() {
        assert_eq!(
            "batch".parse::<CommitLogSync>().unwrap(),
            CommitLogSync::Batch
        );
        assert_eq!(
            "periodic".parse::<CommitLogSync>().unwrap(),
            CommitLogSync::Periodic { period_ms: 10_000 }
        );
        assert_eq!(
            "periodic:50ms".parse::<CommitLogSync>().unwrap(),
            CommitLogSync::Periodic { period_ms: 50 }
        );
        assert_eq!(
            "group:100us".parse::<CommitLogSync>().unwrap(),
            CommitLogSync::Group {
                window: Duration::from_micros(100)
            }
        );
        assert_eq!(
            "group:0.1ms".parse::<CommitLogSync>().unwrap(),
            CommitLogSync::Group {
                window: Duration::from_micros(100)
            }
        );
        for m in [
            "batch",
            "periodic:50ms",
            "group:100us",
            "group:2ms",
            "group:250ns",
        ] {
            let s: CommitLogSync = m.parse().unwrap();
            assert_eq!(s.to_string().parse::<CommitLogSync>().unwrap(), s);
        }
    }

    #[test]
    fn bad_values_list_the_valid_ones() {
        for bad in [
            "sync",
            "group:fast",
            "periodic:5",
            "batch:1ms",
            "periodic:0ms",
            "group:1h",
        ] {
            let e = bad.parse::<CommitLogSync>().unwrap_err().to_string();
            assert!(e.contains("commitlog_sync"), "{bad}: {e}");
            if bad != "periodic:0ms" {
                assert!(
                    e.contains("batch, periodic") || e.contains("at most"),
                    "{bad}: {e}"
                );
            }
        }
    }

    #[test]
    fn serde_snake_case_round_trip() {
        #[derive(Serialize, Deserialize, PartialEq, Debug)]
        struct Doc {
            commitlog: CommitLogConfig,
        }
        let text = r#"
            [commitlog]
            segment_size = 4096
            sync = { group = { window = "100us" } }
        "#;
        let d: Doc = toml::from_str(text).unwrap();
        assert_eq!(
            d.commitlog.sync,
            CommitLogSync::Group {
                window: Duration::from_micros(100)
            }
        );
        assert_eq!(d.commitlog.segment_size, 4096);
        let back: Doc = toml::from_str(&toml::to_string(&d).unwrap()).unwrap();
        assert_eq!(back, d);
        let d: Doc = toml::from_str("[commitlog]\nsync = \"batch\"").unwrap();
        assert_eq!(d.commitlog.sync, CommitLogSync::Batch);
        let d: Doc =
            toml::from_str("[commitlog]\nsync = { periodic = { period_ms = 20 } }").unwrap();
        assert_eq!(d.commitlog.sync, CommitLogSync::Periodic { period_ms: 20 });
        assert!(toml::from_str::<Doc>("[commitlog]\nsync = \"sometimes\"").is_err());
    }

    #[derive(Serialize, Deserialize, PartialEq, Debug)]
    struct SyncDoc {
        sync: CommitLogSync,
    }

    fn sync_of(text: &str) -> std::result::Result<CommitLogSync, String> {
        toml::from_str::<SyncDoc>(text)
            .map(|d| d.sync)
            .map_err(|e| e.to_string())
    }

    /// `period` takes the same duration text as `window`; `period_ms` is still read.
    #[test]
    fn period_is_duration_text_and_period_ms_still_reads() {
        let p = |ms| CommitLogSync::Periodic { period_ms: ms };
        assert_eq!(
            sync_of(r#"sync = { periodic = { period = "10s" } }"#),
            Ok(p(10_000))
        );
        assert_eq!(
            sync_of(r#"sync = { periodic = { period = "250ms" } }"#),
            Ok(p(250))
        );
        assert_eq!(
            sync_of(r#"sync = { periodic = { period = "1.5s" } }"#),
            Ok(p(1_500))
        );
        assert_eq!(
            sync_of(r#"sync = { periodic = { period = "1m" } }"#),
            Ok(p(60_000))
        );
        assert_eq!(
            sync_of("sync = { periodic = { period_ms = 20 } }"),
            Ok(p(20))
        );
        assert_eq!(
            sync_of("sync = { periodic = {} }"),
            Ok(CommitLogSync::default())
        );
        for (bad, says) in [
            (
                r#"sync = { periodic = { period = "10s", period_ms = 5 } }"#,
                "not both",
            ),
            (
                r#"sync = { periodic = { period = "100us" } }"#,
                "whole number of milliseconds",
            ),
            (r#"sync = { periodic = { period = "10" } }"#, "no unit"),
            (
                r#"sync = { periodic = { period = "10y" } }"#,
                "unknown duration unit",
            ),
            (
                r#"sync = { periodic = { every = "10s" } }"#,
                "unknown field",
            ),
        ] {
            let e = sync_of(bad).unwrap_err();
            assert!(e.contains(says), "{bad}: {e}");
        }
    }

    /// Serialising writes the new form, and it reads back; `Display` prints the
    /// duration too, and `FromStr` reads it back.
    #[test]
    fn the_new_form_is_written_and_displayed() {
        let d = SyncDoc {
            sync: CommitLogSync::Periodic { period_ms: 10_000 },
        };
        let text = toml::to_string(&d).unwrap();
        assert!(text.contains(r#"period = "10s""#), "{text}");
        assert!(!text.contains("period_ms"), "{text}");
        assert_eq!(toml::from_str::<SyncDoc>(&text).unwrap(), d);
        let g = SyncDoc {
            sync: CommitLogSync::Group {
                window: Duration::from_micros(100),
            },
        };
        let text = toml::to_string(&g).unwrap();
        assert!(text.contains(r#"window = "100us""#), "{text}");
        assert_eq!(toml::from_str::<SyncDoc>(&text).unwrap(), g);
        assert_eq!(CommitLogSync::default().to_string(), "periodic:10s");
        assert_eq!(
            CommitLogSync::Periodic { period_ms: 1_500 }.to_string(),
            "periodic:1500ms"
        );
        for ms in [1, 50, 1_000, 1_500, 10_000, 3_600_000] {
            let s = CommitLogSync::Periodic { period_ms: ms };
            assert_eq!(s.to_string().parse::<CommitLogSync>().unwrap(), s);
        }
    }
}
