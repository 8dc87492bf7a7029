//! Evaluation bounded in time and memory.
//!
//! Nickel is a full language: a declaration can recurse forever, and one did, growing past
//! 13 GB in a minute. The mesh evaluates a declaration in a child process of its own binary
//! (the program named by [`Evaluator::Child`], run with [`CHILD_ARG`], which calls
//! [`crate::serve`]): the child limits its
//! own address space (`RLIMIT_AS`) before it reads anything, and the mesh kills it when the time
//! limit passes. Should the mesh itself be killed first, the child does not outlive it: it asks
//! the kernel for SIGKILL when its parent goes, and its CPU time is limited too (`RLIMIT_CPU`, a
//! little past the time limit). So a declaration that goes past either limit ends the child, never the node's
//! memory or the mesh itself, and the mesh reports which limit it went past (exit 1). A crash of
//! the evaluator (a stack overflow, a panic) is reported too, never a silent abort.
//!
//! The child ([`crate::child`]) does all of the work that needs Nickel's values: the walk of
//! the imports ([`crate::imports`]), the evaluation, and the assembly (whose rejections point
//! into the sources). It keeps what it built ([`crate::keep`]: the blobs, the generation, the cache
//! entries, in the state directory it was given) and answers with the generation's id and
//! summary, or with the rejection, spans included: a large node's generation is not encoded
//! for the mesh to decode again. A build the cache answers starts no child.
//!
//! The answer on the child's stdout: a little-endian `u64` length, then that many bytes of JSON
//! ([`Answer`]). The child closes its stdout once it has answered, so the mesh goes on while the
//! child gives its memory back (and reaps it on the side). A node built before is built by a
//! child that stays and serves the other builds of the process too ([`crate::serving`]); one
//! asked again in a child of its own is told so ([`WARM_ARG`]) and loads Nickel's standard
//! library as it starts.

use std::collections::BTreeMap;
use std::io::{Read, Write};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Duration;

use mesh_lib::image_lock::ImageLock;
use mesh_lib::model::Summary;
use mesh_lib::GenerationId;
use serde::{Deserialize, Serialize};

use crate::diagnostic::MeshDiagnostic;
use crate::eval::ReadSource;
use crate::imports::Tree;

/// The first argument that makes the mesh's binary (or any binary that calls [`crate::serve`] for
/// it) an evaluating child.
pub const CHILD_ARG: &str = "__mesh-evaluate";

/// The argument after [`CHILD_ARG`] that has the child load Nickel's standard library as it
/// starts: a node built before, most likely with a few modules to evaluate in that process.
pub(crate) const WARM_ARG: &str = "--warm";

/// The default time limit, in seconds.
pub const DEFAULT_TIME_SECONDS: u64 = 60;
/// The default memory limit, in MiB.
pub const DEFAULT_MEMORY_MIB: u64 = 2048;

/// How long and how much memory an evaluation may take.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limits {
    /// Wall-clock time, from the child's start to its answer.
    pub time: Duration,
    /// The child's address space, in MiB (the evaluator's own code and libraries included).
    pub memory_mib: u64,
}

impl Default for Limits {
    fn default() -> Self {
        Self {
            time: Duration::from_secs(DEFAULT_TIME_SECONDS),
            memory_mib: DEFAULT_MEMORY_MIB,
        }
    }
}

/// Where a declaration is evaluated.
#[derive(Debug, Clone)]
pub enum Evaluator {
    /// In this process, unbounded: for tests, benches, and the child itself.
    InProcess,
    /// In a child process, bounded by `limits`: `program CHILD_ARG`.
    Child {
        /// The program to run; it must call [`crate::serve`] when given [`CHILD_ARG`].
        program: PathBuf,
        /// The limits.
        limits: Limits,
    },
}

impl Evaluator {
    /// A child of this very binary (`/proc/self/exe`: the same file even if it was replaced on
    /// disk since), bounded by `limits`.
    pub fn this_binary(limits: Limits) -> Self {
        Self::Child {
            program: PathBuf::from("/proc/self/exe"),
            limits,
        }
    }
}

/// A limit an evaluation went past.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Exceeded {
    /// The time limit.
    Time(Duration),
    /// The memory limit, in MiB.
    Memory(u64),
    /// The evaluator's stack: recursion too deep for it.
    Stack,
}

impl std::fmt::Display for Exceeded {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Exceeded::Time(t) => write!(
                f,
                "the time limit of {} s (--eval-timeout, MESH_EVAL_TIMEOUT)",
                t.as_secs_f64()
            ),
            Exceeded::Memory(m) => write!(
                f,
                "the memory limit of {m} MiB (--eval-memory, MESH_EVAL_MEMORY)"
            ),
            Exceeded::Stack => f.write_str("the evaluator's stack (a recursion too deep)"),
        }
    }
}

/// Why a bounded evaluation gave no answer.
#[derive(Debug, thiserror::Error)]
pub enum BoundedError {
    /// The declaration went past a limit.
    #[error("evaluating {} went past {limit}: it was stopped; a declaration that does not terminate, or one far larger than a node needs, does this", .node.display())]
    Exceeded {
        /// The declaration.
        node: PathBuf,
        /// Which limit.
        limit: Exceeded,
    },
    /// The evaluator could not run, or died in a way no limit explains.
    #[error("the evaluator of {} failed: {reason}", .node.display())]
    Failed {
        /// The declaration.
        node: PathBuf,
        /// What happened.
        reason: String,
    },
}

/// What the evaluating child needs.
#[derive(Serialize, Deserialize)]
pub(crate) struct Request {
    pub node: PathBuf,
    pub library: PathBuf,
    /// Where the declaration's imports may lead.
    pub tree: Tree,
    pub pinned: BTreeMap<String, u16>,
    /// The digests of the images named by tag, from the fleet's image lock.
    #[serde(default)]
    pub images: ImageLock,
    /// The node record's canonical bytes and the name diagnostics call it by.
    pub record: Option<(String, String)>,
    pub memory_mib: u64,
    /// The time limit in whole seconds, rounded up: the child's CPU time limit, one more.
    pub time_seconds: u64,
    /// Whether modules are evaluated apart and cached ([`crate::incremental`]).
    #[serde(default)]
    pub per_module: bool,
    /// The state directory whose per-module cache is read (`None`: none is).
    #[serde(default)]
    pub cache_dir: Option<PathBuf>,
    /// The state directory whose store keeps the generation.
    pub state_dir: PathBuf,
    /// The key of the evaluation cache's entry to write (`None`: no cache is written).
    #[serde(default)]
    pub cache_key: Option<[u8; 32]>,
    /// The program that evaluates chunks of modules, one process each (`None`: they are
    /// evaluated here, one after another).
    #[serde(default)]
    pub program: Option<PathBuf>,
    /// A chunk to evaluate: the node's declaration with some of its modules
    /// ([`crate::spine::Spine::wrapper`]), evaluated as if it were the file `node`; its value
    /// is the answer.
    #[serde(default)]
    pub chunk: Option<String>,
    /// When what is built is kept.
    #[serde(default)]
    pub keep_if: crate::KeepIf,
}

#[derive(Serialize, Deserialize)]
pub(crate) enum Answer {
    /// Built, and kept in the store unless `kept` says not (see [`crate::KeepIf`]).
    Kept {
        id: GenerationId,
        summary: Summary,
        evaluated: Option<usize>,
        kept: bool,
        unpinned: Vec<(String, String)>,
    },
    Rejected(Box<MeshDiagnostic>),
    /// What was built could not be kept: the store failed.
    NotKept(String),
    /// A chunk's value, and the files it read.
    Chunk {
        value: Box<serde_json::value::RawValue>,
        sources: Vec<(PathBuf, String)>,
    },
}

/// Where chunks of modules are evaluated: `program`, one process each, within `limits`, for
/// the node of `request`.
pub(crate) struct Chunks<'a> {
    pub(crate) program: PathBuf,
    pub(crate) limits: Limits,
    pub(crate) request: &'a Request,
}

impl Chunks<'_> {
    /// Evaluates `text` (a chunk of the node's declaration) in a process of its own: its value
    /// and the files it read; `None` if it failed in any way (the node is then evaluated whole,
    /// which says why).
    pub(crate) fn evaluate(
        &self,
        text: String,
    ) -> Option<(Box<serde_json::value::RawValue>, Vec<ReadSource>)> {
        let request = Request {
            node: self.request.node.clone(),
            library: self.request.library.clone(),
            tree: self.request.tree.clone(),
            pinned: self.request.pinned.clone(),
            images: ImageLock::default(),
            record: None,
            memory_mib: self.limits.memory_mib,
            time_seconds: self.request.time_seconds,
            per_module: false,
            cache_dir: None,
            state_dir: self.request.state_dir.clone(),
            cache_key: None,
            program: None,
            chunk: Some(text),
            keep_if: crate::KeepIf::default(),
        };
        let input = serde_json::to_vec(&request).ok()?;
        let output = run_child(&self.program, self.limits, &request.node, &input, false).ok()?;
        match serde_json::from_slice(unframe(&output)?).ok()? {
            Answer::Chunk { value, sources } => Some((value, decode_sources(sources).ok()?)),
            _ => None,
        }
    }
}

fn decode_sources(sources: Vec<(PathBuf, String)>) -> Result<Vec<ReadSource>, String> {
    sources
        .into_iter()
        .map(|(p, hex)| {
            let hash = blake3::Hash::from_hex(&hex).map_err(|e| e.to_string())?;
            Ok((p, *hash.as_bytes()))
        })
        .collect()
}

pub(crate) fn encode_sources(sources: Vec<ReadSource>) -> Vec<(PathBuf, String)> {
    sources
        .into_iter()
        .map(|(p, d)| (p, blake3::Hash::from_bytes(d).to_hex().to_string()))
        .collect()
}

/// Runs `program` as an evaluating child with `input` on its stdin, bounded by `limits`; its
/// stdout, once it exited with success.
pub(crate) fn run_child(
    program: &Path,
    limits: Limits,
    node: &Path,
    input: &[u8],
    warm: bool,
) -> Result<Vec<u8>, BoundedError> {
    let failed = |reason: String| BoundedError::Failed {
        node: node.to_owned(),
        reason,
    };
    let mut child = Command::new(program)
        .arg(CHILD_ARG)
        .args(warm.then_some(WARM_ARG))
        // Out of memory, Rust's runtime prints a backtrace when this asks for one — and
        // reading its own maps to print it needs memory, whose failure waits forever on the
        // lock the first failure holds: the child would hang until the wall clock, not stop at
        // its memory limit.
        .env_remove("RUST_BACKTRACE")
        .env_remove("RUST_LIB_BACKTRACE")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(|e| failed(format!("cannot start {}: {e}", program.display())))?;
    let started = std::time::Instant::now();
    let mut stdout = child.stdout.take().expect("piped");
    let mut stderr = child.stderr.take().expect("piped");
    let (done, answered) = std::sync::mpsc::channel();
    let reader = std::thread::spawn(move || {
        let mut bytes = Vec::new();
        let result = stdout.read_to_end(&mut bytes).map(|_| bytes);
        let _receiver_gone = done.send(());
        result
    });
    let errors = std::thread::spawn(move || {
        let mut bytes = Vec::new();
        let _unreadable = stderr.read_to_end(&mut bytes);
        bytes
    });
    // The child reads its whole request before anything else; a child that died first
    // (closing its stdin) is reported from its status below.
    if let Some(mut stdin) = child.stdin.take() {
        let _child_gone = stdin.write_all(input);
    }
    let timed_out = answered
        .recv_timeout(limits.time.saturating_sub(started.elapsed()))
        .is_err();
    if timed_out {
        // Not reaped yet, so the pid is still the child's.
        let _already_gone = child.kill();
    } else if matches!(child.try_wait(), Ok(None)) {
        // The child closes its output once it has answered, and may still be going away (a
        // large evaluation's memory takes a while to give back): a whole answer needs no
        // status, and the child is reaped on the side.
        let output = reader.join().map_err(drop);
        if let Ok(Ok(whole)) = &output {
            if is_whole_answer(whole) {
                let output = output.and_then(|o| o.map_err(drop)).unwrap_or_default();
                std::thread::spawn(move || {
                    let _status = child.wait();
                    let _stderr = errors.join();
                });
                return Ok(output);
            }
        }
        return finish_child(child, output, errors, node, limits, false);
    }
    finish_child(
        child,
        reader.join().map_err(drop),
        errors,
        node,
        limits,
        timed_out,
    )
}

/// The JSON of an answer: `output` is its length, then at least that many bytes.
fn unframe(output: &[u8]) -> Option<&[u8]> {
    let (len, rest) = output.split_first_chunk::<8>()?;
    rest.get(..usize::try_from(u64::from_le_bytes(*len)).ok()?)
}

/// Whether `output` is a whole answer: its length, then that many bytes.
fn is_whole_answer(output: &[u8]) -> bool {
    unframe(output).is_some_and(|json| json.len() + 8 == output.len())
}

/// Waits for the child, then reads its answer (`output`), or why it gave none.
pub(crate) fn finish_child(
    mut child: std::process::Child,
    output: Result<std::io::Result<Vec<u8>>, ()>,
    errors: std::thread::JoinHandle<Vec<u8>>,
    node: &Path,
    limits: Limits,
    timed_out: bool,
) -> Result<Vec<u8>, BoundedError> {
    let failed = |reason: String| BoundedError::Failed {
        node: node.to_owned(),
        reason,
    };
    let status = child.wait().map_err(|e| failed(e.to_string()))?;
    let output = output
        .map_err(|()| failed("its output could not be read".into()))?
        .map_err(|e| failed(format!("reading its answer: {e}")))?;
    let errors = String::from_utf8_lossy(&errors.join().unwrap_or_default()).into_owned();
    let exceeded = |limit| BoundedError::Exceeded {
        node: node.to_owned(),
        limit,
    };
    if timed_out {
        return Err(exceeded(Exceeded::Time(limits.time)));
    }
    if !status.success() {
        use std::os::unix::process::ExitStatusExt;
        // Under RLIMIT_AS an allocation fails and Rust aborts with this message; a thread's
        // stack that cannot grow is a SIGSEGV or SIGBUS.
        if errors.contains("memory allocation of") || errors.contains("out of memory") {
            return Err(exceeded(Exceeded::Memory(limits.memory_mib)));
        }
        if errors.contains("overflowed its stack") {
            return Err(exceeded(Exceeded::Stack));
        }
        if status.signal() == Some(rustix::process::Signal::XCPU.as_raw()) {
            return Err(exceeded(Exceeded::Time(limits.time)));
        }
        let how = match (status.code(), status.signal()) {
            (Some(code), _) => format!("exit {code}"),
            (_, Some(signal)) => format!("signal {signal}"),
            _ => "an unknown status".into(),
        };
        let said = mesh_lib::text::escape_keeping_lines(errors.trim()).into_owned();
        return Err(failed(if said.is_empty() {
            format!(
                "it ended with {how} and said nothing (out of memory, within the limit of {} MiB?)",
                limits.memory_mib
            )
        } else {
            format!("it ended with {how}: {said}")
        }));
    }
    Ok(output)
}

pub(crate) fn decode(output: &[u8]) -> Result<Result<crate::Kept, crate::BuildError>, String> {
    let json = unframe(output).ok_or("it is cut short")?;
    match serde_json::from_slice(json).map_err(|e| e.to_string())? {
        Answer::Rejected(d) => Ok(Err((*d).into())),
        Answer::NotKept(reason) => Ok(Err(crate::BuildError::NotKept(reason))),
        Answer::Chunk { .. } => Err("a chunk's answer, not a node's".into()),
        Answer::Kept {
            id,
            summary,
            evaluated,
            kept,
            unpinned,
        } => Ok(Ok(crate::Kept {
            id,
            summary,
            evaluated,
            generation: None,
            kept,
            unpinned,
        })),
    }
}

/// The answer: its JSON's length, then its JSON.
pub(crate) fn frame(answer: Answer) -> Result<Vec<u8>, serde_json::Error> {
    let json = serde_json::to_vec(&answer)?;
    let mut out = Vec::with_capacity(8 + json.len());
    out.extend_from_slice(&(json.len() as u64).to_le_bytes());
    out.extend_from_slice(&json);
    Ok(out)
}
