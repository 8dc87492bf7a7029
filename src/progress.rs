//! The container phase's progress, shown when it runs longer than a moment: a bar on a terminal
//! (indicatif), a plain line every few seconds otherwise (a log, a CI job), both on stderr so
//! that `--json` output stays one object. The images a switch fetches before it: a line each on
//! a terminal (its bytes as they come), otherwise a line when the fetch begins and one per image
//! fetched or failed.

use std::io::IsTerminal;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};

/// Nothing is shown for a phase shorter than this.
const A_MOMENT: Duration = Duration::from_secs(1);
/// Without a terminal, a line at most this often.
const PLAIN_EVERY: Duration = Duration::from_secs(5);

/// Reports the container phase of a switch, and the fetch of its images before it.
pub struct Containers {
    terminal: bool,
    state: Mutex<State>,
    images: Mutex<Images>,
}

/// The images being fetched: a line each on a terminal.
#[derive(Default)]
struct Images {
    started: Option<Instant>,
    bars: Option<(indicatif::MultiProgress, Vec<(String, ProgressBar)>)>,
}

struct State {
    started: Instant,
    total: usize,
    bar: Option<ProgressBar>,
    last_line: Option<Instant>,
}

impl Containers {
    pub fn new() -> Self {
        Self {
            terminal: std::io::stderr().is_terminal(),
            state: Mutex::new(State {
                started: Instant::now(),
                total: 0,
                bar: None,
                last_line: None,
            }),
            images: Mutex::new(Images::default()),
        }
    }
}

/// The containers in flight, escaped, a few of them named.
fn in_flight_text(in_flight: &[&str]) -> String {
    let named: Vec<String> = in_flight
        .iter()
        .take(3)
        .map(|n| mesh_lib::text::escape(n).into_owned())
        .collect();
    match in_flight.len() {
        0 => String::new(),
        n if n <= 3 => format!("in flight: {}", named.join(", ")),
        n => format!("in flight: {} (+{} more)", named.join(", "), n - 3),
    }
}

/// An image for a line of its own: its digest cut to 12 hex digits, as `docker images` shows
/// ids (`REPO:TAG@a7cd3a45fbef`), so the bar fits beside it.
fn short(image: &str) -> String {
    match image.split_once("@sha256:") {
        Some((name, hex)) => format!("{name}@{}", &hex[..hex.len().min(12)]),
        None => image.to_owned(),
    }
}

impl mesh_containers::Progress for Containers {
    fn begin(&self, total: usize) {
        let mut s = self.state.lock().unwrap_or_else(|e| e.into_inner());
        s.started = Instant::now();
        s.total = total;
        s.bar = None;
        s.last_line = None;
    }

    fn update(&self, done: usize, in_flight: &[&str]) {
        let mut s = self.state.lock().unwrap_or_else(|e| e.into_inner());
        let elapsed = s.started.elapsed();
        if elapsed < A_MOMENT {
            return;
        }
        if self.terminal {
            let total = s.total as u64;
            let bar = s.bar.get_or_insert_with(|| {
                let bar = ProgressBar::with_draw_target(
                    Some(total),
                    ProgressDrawTarget::stderr_with_hz(4),
                );
                bar.set_style(
                    ProgressStyle::with_template(
                        "containers [{bar:30}] {pos}/{len} {elapsed} {wide_msg}",
                    )
                    .unwrap_or_else(|_| ProgressStyle::default_bar())
                    .progress_chars("=> "),
                );
                bar
            });
            bar.set_position(done as u64);
            bar.set_message(in_flight_text(in_flight));
        } else if s.last_line.is_none_or(|t| t.elapsed() >= PLAIN_EVERY) {
            s.last_line = Some(Instant::now());
            eprintln!(
                "containers: {done} of {} done after {} s{}",
                s.total,
                elapsed.as_secs(),
                match in_flight_text(in_flight) {
                    t if t.is_empty() => t,
                    t => format!("; {t}"),
                }
            );
        }
    }

    fn end(&self) {
        let mut s = self.state.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(bar) = s.bar.take() {
            bar.finish_and_clear();
        }
    }

    fn fetch_begin(&self, images: &[&str]) {
        let mut s = self.images.lock().unwrap_or_else(|e| e.into_inner());
        s.started = Some(Instant::now());
        if self.terminal {
            let multi =
                indicatif::MultiProgress::with_draw_target(ProgressDrawTarget::stderr_with_hz(4));
            let bars = images
                .iter()
                .map(|image| {
                    // A spinner until the engine says how many bytes come: a bar of 0 B/0 B
                    // would read full.
                    let bar = multi.add(ProgressBar::new(0));
                    bar.set_style(spinner_style());
                    bar.enable_steady_tick(Duration::from_millis(250));
                    bar.set_prefix(mesh_lib::text::escape(&short(image)).into_owned());
                    bar.set_message("waiting");
                    ((*image).to_owned(), bar)
                })
                .collect();
            s.bars = Some((multi, bars));
        } else {
            eprintln!(
                "fetching {} image(s) before anything changes: {}",
                images.len(),
                images
                    .iter()
                    .map(|i| mesh_lib::text::escape(i).into_owned())
                    .collect::<Vec<_>>()
                    .join(", ")
            );
        }
    }

    fn fetching(&self, image: &str, state: mesh_containers::Fetching) {
        use mesh_containers::Fetching;
        let s = self.images.lock().unwrap_or_else(|e| e.into_inner());
        if let Some((_, bars)) = &s.bars {
            let Some((_, bar)) = bars.iter().find(|(i, _)| i == image) else {
                return;
            };
            match state {
                Fetching::Waiting => bar.set_message("waiting"),
                Fetching::Bytes { total: 0, .. } => {}
                Fetching::Bytes { done, total } => {
                    if bar.length() == Some(0) {
                        bar.disable_steady_tick();
                        bar.set_style(bytes_style());
                    }
                    bar.set_length(total);
                    bar.set_position(done);
                    bar.set_message("");
                }
                Fetching::Done => {
                    bar.disable_steady_tick();
                    bar.set_position(bar.length().unwrap_or(0));
                    bar.finish_with_message("fetched, digest checked");
                }
                Fetching::Failed => {
                    bar.disable_steady_tick();
                    bar.abandon_with_message("failed");
                }
            }
        } else {
            let elapsed = s.started.map_or(0, |t| t.elapsed().as_secs());
            match state {
                Fetching::Done => eprintln!(
                    "fetched image {}, digest checked ({elapsed} s)",
                    mesh_lib::text::escape(image)
                ),
                Fetching::Failed => eprintln!(
                    "could not fetch image {} ({elapsed} s)",
                    mesh_lib::text::escape(image)
                ),
                Fetching::Bytes { .. } | Fetching::Waiting => {}
            }
        }
    }

    fn fetch_end(&self) {
        let mut s = self.images.lock().unwrap_or_else(|e| e.into_inner());
        // The lines stay: what was fetched is worth seeing above what the switch did.
        if let Some((_multi, bars)) = s.bars.take() {
            for (_, bar) in &bars {
                if !bar.is_finished() {
                    bar.abandon();
                }
            }
        }
    }
}

/// An image whose size is not known yet: a spinner.
fn spinner_style() -> ProgressStyle {
    ProgressStyle::with_template("image {prefix} {spinner} {wide_msg}")
        .unwrap_or_else(|_| ProgressStyle::default_spinner())
}

/// An image whose layers said their sizes: a bar of bytes.
fn bytes_style() -> ProgressStyle {
    ProgressStyle::with_template("image {prefix} [{bar:20}] {bytes}/{total_bytes} {wide_msg}")
        .unwrap_or_else(|_| ProgressStyle::default_bar())
        .progress_chars("=> ")
}
