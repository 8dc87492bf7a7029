//! The evaluating child's side: the request read, its own limits set, the declaration
//! evaluated and assembled (module by module where it can, chunks of modules in processes of
//! their own), the generation kept, and the answer written (see [`crate::bounded`] for the
//! parent's side and what crosses the pipe).

use std::io::{Read, Write};
use std::time::Duration;

use mesh_lib::NodeRecord;

use crate::assemble::{Assembled, RecordSource};
use crate::bounded::{encode_sources, frame, Answer, Chunks, Limits, Request, WARM_ARG};
use crate::diagnostic::MeshDiagnostic;
use crate::eval::ReadSource;
use crate::memory::discard;

/// An evaluation's result: the assembled generation and the sources it read.
pub(crate) struct Evaluated {
    pub assembled: Assembled,
    pub sources: Vec<ReadSource>,
    /// The per-module cache entries to write.
    pub entries: Vec<crate::cache::modules::Entry>,
    /// The keys of the node's modules, whose entries the cache keeps when it bounds itself.
    pub live: Vec<String>,
    /// How many modules were evaluated, when they were evaluated apart (`None`: the node was
    /// evaluated whole).
    pub evaluated: Option<usize>,
    /// The imports of the texts the walk parsed, to remember when they changed.
    pub parsed: Option<crate::imports::Parsed>,
    /// The store, when it was opened (and the blobs of the modules read from the cache put in
    /// it) while the evaluation went on.
    pub store: Option<mesh_lib::Store>,
}

/// Evaluates and assembles in this process: what the child does, and what
/// [`Evaluator::InProcess`] does.
/// `warm`: an evaluator already loading the standard library, if one was started.
pub(crate) fn evaluate_here(
    request: &Request,
    warm: Option<&crate::eval::Warm>,
) -> Result<Evaluated, MeshDiagnostic> {
    let mut evaluated = evaluate_declaration(request, warm)?;
    // The secrets' ciphertexts are read from the tree, and are sources like the imports.
    let read = crate::secrets::resolve(&mut evaluated.assembled, &request.tree, &request.library)?;
    evaluated.sources.extend(read);
    Ok(evaluated)
}

/// Evaluates the declaration and assembles its generation, its secrets not yet read; a
/// container named by a tag the image lock holds is pinned by its locked digest (after the
/// assembly, so the modules' caches hold what the declaration says, whatever the lock).
fn evaluate_declaration(
    request: &Request,
    warm: Option<&crate::eval::Warm>,
) -> Result<Evaluated, MeshDiagnostic> {
    let mut evaluated = evaluate_as_declared(request, warm)?;
    if !request.images.images.is_empty() {
        for entry in evaluated.assembled.generation.containers.values_mut() {
            request.images.pin(entry);
        }
    }
    Ok(evaluated)
}

/// [`evaluate_declaration`], the images as declared.
fn evaluate_as_declared(
    request: &Request,
    warm: Option<&crate::eval::Warm>,
) -> Result<Evaluated, MeshDiagnostic> {
    let tree = &request.tree;
    let known = match (&request.cache_dir, request.per_module) {
        (Some(dir), true) => crate::cache::modules::load_parsed(dir, &request.node),
        _ => crate::imports::Parsed::new(),
    };
    // A node built before here: most likely a few of its modules changed, to be evaluated
    // here, so the evaluator loads its standard library while the walk goes on. (Not for a
    // first build: its modules are evaluated in processes of their own, and the walk parses
    // on every core.)
    let started = match warm {
        None if !known.is_empty() => crate::eval::Warm::start(),
        _ => None,
    };
    let warm = warm.or(started.as_ref());
    if let Some(w) = warm {
        w.library(&request.library);
    }
    let (graph, parsed) = crate::imports::walk_with(
        &request.node,
        std::slice::from_ref(&request.library),
        tree,
        &known,
    )?;
    let parsed =
        (request.cache_dir.is_some() && request.per_module && parsed != known).then_some(parsed);
    let record = match &request.record {
        Some((bytes, name)) => Some((
            NodeRecord::parse(bytes.as_bytes())
                .map_err(|e| MeshDiagnostic::new(format!("{name}: {e}")))?,
            name.clone(),
        )),
        None => None,
    };
    let source = record.as_ref().map(|(record, name)| RecordSource {
        record,
        name: name.clone(),
    });
    if request.per_module {
        // The blobs of the modules read from the cache are put in the store while the others
        // are evaluated (the store and its packs' index then ready for the rest): most, if
        // not all, are there already — the build that cached those modules stored them.
        let store = std::sync::OnceLock::new();
        let early = |assembly: &crate::assemble::Assembly<'_>| {
            if let Ok(opened) = mesh_lib::Store::open(&request.state_dir) {
                let blobs = assembly.blobs().map(|b| (b.bytes.as_slice(), b.private));
                // Put again with the rest, whatever happened here.
                let _again_at_the_keep = opened.put_blobs_deferred(blobs);
                let _once = store.set(opened);
            }
        };
        let inputs = crate::incremental::Inputs {
            node: &request.node,
            library: &request.library,
            pinned: &request.pinned,
            tree,
            graph: &graph,
            record: source.as_ref(),
            cache: request.cache_dir.as_deref(),
            early: request.cache_dir.is_some().then_some(&early as _),
            threads: if request.program.is_some() {
                processes()
            } else {
                1
            },
            chunks: request.program.as_ref().map(|program| Chunks {
                program: program.clone(),
                limits: Limits {
                    time: Duration::from_secs(request.time_seconds.max(1)),
                    // Together the chunks stay within the limit; one that needs more fails,
                    // and the node is evaluated whole, within all of it.
                    memory_mib: (request.memory_mib / processes() as u64).max(64),
                },
                request,
            }),
        };
        let answer = crate::incremental::evaluate(&inputs, warm);
        if let Some(answer) = answer {
            discard((graph, known));
            return Ok(Evaluated {
                assembled: answer.assembled,
                sources: answer.sources,
                entries: answer.entries,
                live: answer.live,
                evaluated: Some(answer.evaluated),
                parsed,
                store: store.into_inner(),
            });
        }
    }
    let evaluation =
        crate::eval::evaluate_in(&request.node, &request.library, &request.pinned, tree)?;
    let assembled = crate::assemble::assemble(&evaluation, source.as_ref())?;
    Ok(Evaluated {
        assembled,
        sources: evaluation.read_sources(),
        entries: Vec::new(),
        live: Vec::new(),
        evaluated: None,
        parsed,
        store: None,
    })
}

/// How many processes evaluate chunks of modules at once: one per core. (Threads would not do:
/// Nickel's evaluator is not `Send`, and its identifiers are interned behind one global lock.)
fn processes() -> usize {
    std::thread::available_parallelism().map_or(1, std::num::NonZeroUsize::get)
}

/// A chunk evaluated here: what a chunk's process answers.
pub(crate) fn evaluate_chunk_here(
    request: &Request,
    text: String,
) -> Result<(Box<serde_json::value::RawValue>, Vec<ReadSource>), MeshDiagnostic> {
    let tree = &request.tree;
    let evaluation = crate::eval::evaluate_text_in(
        &request.node,
        text,
        &request.library,
        &request.pinned,
        tree,
    )?;
    let value = evaluation.to_json().map_err(MeshDiagnostic::new)?;
    let sources = evaluation.read_sources();
    // Handing the evaluation's memory back one allocation at a time (some 7 ms for a hundred
    // modules) would only delay the answer.
    crate::memory::discard(evaluation);
    Ok((value, sources))
}

fn encode(result: Result<crate::Kept, crate::BuildError>) -> Result<Vec<u8>, String> {
    frame(match result {
        Ok(kept) => Answer::Kept {
            id: kept.id,
            summary: kept.summary,
            evaluated: kept.evaluated,
            kept: kept.kept,
            unpinned: kept.unpinned,
        },
        Err(crate::BuildError::Rejected(d)) => Answer::Rejected(Box::new(d)),
        Err(e) => Answer::NotKept(e.to_string()),
    })
    .map_err(|e| e.to_string())
}

fn encode_chunk(
    result: Result<(Box<serde_json::value::RawValue>, Vec<ReadSource>), MeshDiagnostic>,
) -> Result<Vec<u8>, String> {
    frame(match result {
        Ok((value, sources)) => Answer::Chunk {
            value,
            sources: encode_sources(sources),
        },
        Err(d) => Answer::Rejected(Box::new(d)),
    })
    .map_err(|e| e.to_string())
}

/// The child's side: reads the request on stdin, limits its own address space, evaluates,
/// writes the answer on stdout. Returns the process's exit code: 0 when it answered (a
/// rejection is an answer), 3 when it could not.
pub(crate) fn answer_once(mode: Option<std::ffi::OsString>) -> u8 {
    crate::memory::ENDS_AFTER_ANSWER.store(true, std::sync::atomic::Ordering::Relaxed);
    let warm = mode
        .is_some_and(|a| a == WARM_ARG)
        .then(crate::eval::Warm::start)
        .flatten();
    let mut input = Vec::new();
    if let Err(e) = std::io::stdin().read_to_end(&mut input) {
        eprintln!("mesh evaluator: reading the request: {e}");
        return 3;
    }
    let request: Request = match serde_json::from_slice(&input) {
        Ok(r) => r,
        Err(e) => {
            eprintln!("mesh evaluator: the request cannot be read: {e}");
            return 3;
        }
    };
    drop(input);

    // The mesh waits for this answer; if it is gone, so is the reason to compute it.
    let _best_effort =
        rustix::process::set_parent_process_death_signal(Some(rustix::process::Signal::KILL));
    if request.time_seconds > 0 {
        if let Err(e) = limit_cpu(request.time_seconds.saturating_add(1)) {
            eprintln!("mesh evaluator: {e}");
            return 3;
        }
    }
    if let Err(e) = limit_memory(request.memory_mib) {
        eprintln!("mesh evaluator: {e}");
        return 3;
    }
    let answer = match answer(&request, warm.as_ref()) {
        Ok(a) => a,
        Err(e) => {
            eprintln!("mesh evaluator: cannot encode the answer: {e}");
            return 3;
        }
    };
    let mut stdout = std::io::stdout().lock();
    match stdout.write_all(&answer).and_then(|()| stdout.flush()) {
        Ok(()) => {
            // The answer is whole: the mesh need not wait for this process to go away.
            if let Ok(null) = std::fs::File::open("/dev/null") {
                let _still_open = rustix::stdio::dup2_stdout(&null);
            }
            0
        }
        Err(e) => {
            eprintln!("mesh evaluator: writing the answer: {e}");
            3
        }
    }
}

/// What an evaluating child answers `request`, framed: a chunk's value, or the node's
/// generation kept (or why not).
pub(crate) fn answer(
    request: &Request,
    warm: Option<&crate::eval::Warm>,
) -> Result<Vec<u8>, String> {
    match request.chunk.clone() {
        Some(text) => encode_chunk(evaluate_chunk_here(request, text)),
        None => encode(
            evaluate_here(request, warm)
                .map_err(crate::BuildError::from)
                .and_then(|evaluated| crate::keep(request, evaluated)),
        ),
    }
}

/// Limits this process's CPU time to `seconds` (it gets SIGXCPU past them).
pub(crate) fn limit_cpu(seconds: u64) -> Result<(), String> {
    lower_to(rustix::process::Resource::Cpu, seconds)
        .map_err(|e| format!("cannot limit its time: {e}"))
}

/// Limits this process's address space to `mib` MiB (0: no limit).
pub(crate) fn limit_memory(mib: u64) -> Result<(), String> {
    if mib == 0 {
        return Ok(());
    }
    lower_to(
        rustix::process::Resource::As,
        mib.saturating_mul(1024 * 1024),
    )
    .map_err(|e| format!("cannot limit its memory: {e}"))
}

/// Sets the soft limit of `resource` to `value`, within its hard limit.
fn lower_to(resource: rustix::process::Resource, value: u64) -> rustix::io::Result<()> {
    let hard = rustix::process::getrlimit(resource).maximum;
    let limit = rustix::process::Rlimit {
        current: Some(hard.map_or(value, |h| h.min(value))),
        maximum: hard,
    };
    rustix::process::setrlimit(resource, limit)
}
