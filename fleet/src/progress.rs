//! What a long fleet run says while it runs: a line per node that changes in place on a terminal
//! (indicatif), or plain lines (`node: what`) on standard error otherwise.

use std::collections::BTreeMap;
use std::io::IsTerminal;
use std::sync::Mutex;

use indicatif::{MultiProgress, ProgressBar, ProgressStyle};

/// Where a run reports each node's progress.
pub struct Progress {
    bars: Option<(MultiProgress, Mutex<BTreeMap<String, ProgressBar>>)>,
    quiet: bool,
}

impl Progress {
    /// On a terminal, live lines; otherwise plain ones. `quiet` says nothing at all (for
    /// `--json`).
    pub fn new(quiet: bool) -> Self {
        if quiet || !std::io::stderr().is_terminal() {
            return Self { bars: None, quiet };
        }
        Self {
            bars: Some((MultiProgress::new(), Mutex::new(BTreeMap::new()))),
            quiet,
        }
    }

    /// `node` is at `what` now.
    pub fn say(&self, node: &str, what: &str) {
        match &self.bars {
            None if self.quiet => {}
            None => eprintln!("{node}: {}", mesh_lib::text::escape(what)),
            Some((multi, bars)) => {
                let mut bars = bars.lock().unwrap_or_else(|e| e.into_inner());
                let bar = bars.entry(node.to_owned()).or_insert_with(|| {
                    let bar = multi.add(ProgressBar::new_spinner());
                    bar.set_style(
                        ProgressStyle::with_template("{spinner} {prefix:<16} {msg}")
                            .unwrap_or_else(|_| ProgressStyle::default_spinner()),
                    );
                    bar.set_prefix(node.to_owned());
                    bar.enable_steady_tick(std::time::Duration::from_millis(120));
                    bar
                });
                bar.set_message(what.to_owned());
            }
        }
    }

    /// `node` is done: its last word stays.
    pub fn done(&self, node: &str, what: &str) {
        match &self.bars {
            None => self.say(node, what),
            Some((_, bars)) => {
                let bars = bars.lock().unwrap_or_else(|e| e.into_inner());
                if let Some(bar) = bars.get(node) {
                    bar.finish_with_message(what.to_owned());
                }
            }
        }
    }
}
