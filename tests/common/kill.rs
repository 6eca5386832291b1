//! Kill tests' child handling: run a child process that reports its steps on stdout,
//! kill it at a random moment counted from an event the child reported (never from
//! the spawn: on a loaded machine a child may take longer to start than any fixed
//! delay), and return every line it printed.

use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};
use std::sync::mpsc;
use std::time::Duration;

/// Spawn `cmd` with its stdout piped, wait until the child prints a line for which
/// `is_anchor` holds (or its stdout closes), then wait `delay` more, SIGKILL it and
/// reap it. Returns every line the child printed before it died. A child that ends
/// before its anchor is reaped all the same (the caller checks whatever it left).
pub fn run_and_kill(mut cmd: Command, is_anchor: fn(&str) -> bool, delay: Duration) -> Vec<String> {
    let mut child = cmd
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let stdout = child.stdout.take().unwrap();
    let (reached, at_anchor) = mpsc::channel::<()>();
    let reader = std::thread::spawn(move || {
        let mut lines = Vec::new();
        let mut reached = Some(reached);
        for line in BufReader::new(stdout).lines().map_while(Result::ok) {
            if reached.is_some() && is_anchor(&line) {
                // The parent may already be gone from the receive; ignore a send error.
                let _ = reached.take().map(|tx| tx.send(()));
            }
            lines.push(line);
        }
        lines
    });
    // Ok at the anchor; Err when the pipe closed first (the sender was dropped).
    let _ = at_anchor.recv();
    // The kill point: a random moment after the anchor, not a synchronisation.
    std::thread::sleep(delay);
    let _ = child.kill(); // SIGKILL
    let _ = child.wait();
    reader.join().unwrap()
}

/// In a child the parent spawned: its store directory and seed (`SEGSTORE_CHILD_DIR`,
/// `SEGSTORE_CHILD_SEED`); `None` when the ignored child test runs on its own.
pub fn child_dir_and_seed() -> Option<(String, u64)> {
    let dir = std::env::var("SEGSTORE_CHILD_DIR").ok()?;
    let seed = std::env::var("SEGSTORE_CHILD_SEED")
        .expect("SEGSTORE_CHILD_SEED is set beside SEGSTORE_CHILD_DIR")
        .parse()
        .expect("SEGSTORE_CHILD_SEED is a number");
    Some((dir, seed))
}
