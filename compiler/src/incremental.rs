//! One module changed, one module evaluated.
//!
//! A node's modules are found in its declaration's text ([`crate::spine`]); each has a key in
//! the per-module cache ([`crate::cache::modules`]) made of everything its value depends on.
//! The modules whose keys miss are evaluated — in declarations of their own, the node's with
//! only those modules ([`Spine::wrapper`]), split across the machine's cores, one Nickel
//! evaluation per process (Nickel's evaluator is not `Send`, and its interner is one lock) —
//! and the others are read from the cache. The node is then assembled from the values as from a whole evaluation: the generation
//! is byte for byte the one a whole evaluation gives.
//!
//! Whenever this way cannot answer exactly as a whole evaluation would — the declaration's
//! shape is not one the walk knows, an evaluation fails, the assembly rejects the node, a file
//! changed while it was read — it gives up, and the node is evaluated whole: the diagnostics,
//! with their spans, are the whole evaluation's.

use std::collections::BTreeMap;
use std::path::Path;

use serde_json::value::RawValue;
use serde_json::Value;

use serde::Deserialize;

use crate::assemble::{Assembled, ModuleOut, NodeOut, RecordSource, SettingsOut};
use crate::cache::modules::{self, Entry, Kind};
use crate::eval::ReadSource;
use crate::imports::{Graph, Tree};
use crate::spine::Spine;

/// Fewer misses than this per process are evaluated in fewer processes: each process starts,
/// and loads the standard library and the contracts, again.
const MIN_PER_PROCESS: usize = 4;

/// What the node is evaluated with.
pub(crate) struct Inputs<'a> {
    pub node: &'a Path,
    pub library: &'a Path,
    pub pinned: &'a BTreeMap<String, u16>,
    pub tree: &'a Tree,
    pub graph: &'a Graph,
    pub record: Option<&'a RecordSource<'a>>,
    /// The state directory whose cache is read (`None`: nothing is read from a cache).
    pub cache: Option<&'a Path>,
    /// An evaluator already loading the standard library, for modules evaluated here.
    pub warm: std::cell::Cell<Option<crate::eval::Warm>>,
    /// How many processes may evaluate at once.
    pub threads: usize,
    /// Where chunks of modules are evaluated, when in processes of their own.
    pub chunks: Option<crate::bounded::Chunks<'a>>,
}

/// An answer of the per-module way.
pub(crate) struct Answer {
    pub assembled: Assembled,
    /// Every file the declaration reaches, with the digest of what was read.
    pub sources: Vec<ReadSource>,
    /// The cache entries to write.
    pub entries: Vec<Entry>,
    /// How many modules were evaluated (the others came from the cache).
    pub evaluated: usize,
    /// The keys of every module of the node: the entries a bounded cache keeps.
    pub live: Vec<String>,
}

/// A node's head as the assembly reads it: its name and settings.
#[derive(Deserialize)]
struct HeadOut {
    name: String,
    settings: SettingsOut,
}

/// The evaluated part of one wrapper: the head (unless only the modules were evaluated) and
/// the chosen modules' values (their JSON, as the evaluation wrote it: read once into what the
/// assembly reads, and kept as it is).
struct Evaluated {
    head: Option<Value>,
    modules: Vec<Box<RawValue>>,
    /// Files read whose text is not what the walk read.
    changed: bool,
}

/// Evaluates the node module by module; `None` when only a whole evaluation can answer.
pub(crate) fn evaluate(inputs: &Inputs<'_>) -> Option<Answer> {
    let import_paths = [inputs.library.to_owned()];
    let spine = Spine::of(inputs.node, inputs.library, &import_paths, inputs.graph)?;
    let keys = modules::keys(&spine, inputs.graph, inputs.pinned);
    let mut head: Option<Value> = inputs
        .cache
        .zip(keys.head.as_deref())
        .and_then(|(dir, key)| modules::lookup(dir, Kind::Head, key));
    // Which modules the cache holds is told by the bundles' indexes; the entries are read
    // (straight into what the assembly reads) beside the evaluation of the others, which takes
    // one core. An entry there but unreadable is evaluated after.
    let bundles = inputs.cache.map(modules::Bundles::load);
    let present: Vec<bool> = keys
        .modules
        .iter()
        .map(|k| {
            bundles
                .as_ref()
                .zip(k.as_deref())
                .is_some_and(|(b, key)| b.contains(key))
        })
        .collect();
    let read = || -> Vec<Option<ModuleOut>> {
        keys.modules
            .iter()
            .zip(&present)
            .map(|(k, there)| {
                let key = k.as_deref().filter(|_| *there)?;
                bundles.as_ref()?.lookup(key)
            })
            .collect()
    };
    let head_cached = head.is_some();
    let mut values: Vec<Option<ModuleOut>> = Vec::new();
    let mut entries = Vec::new();
    let mut misses: Vec<usize> = (0..present.len()).filter(|k| !present[*k]).collect();
    loop {
        let (evaluated, read) = std::thread::scope(|scope| {
            let reading = values.is_empty().then(|| scope.spawn(read));
            let evaluated = if misses.is_empty() && head.is_some() {
                Some(Vec::new())
            } else {
                let threads = inputs.threads.min(misses.len() / MIN_PER_PROCESS).max(1);
                let chunks: Vec<Vec<usize>> = (0..threads)
                    .map(|t| misses.iter().copied().skip(t).step_by(threads).collect())
                    .collect();
                run_chunks(inputs, &spine, &chunks, head.is_some())
                    .map(|results| chunks.into_iter().zip(results).collect::<Vec<_>>())
            };
            (evaluated, reading.map(|r| r.join()))
        });
        if let Some(read) = read {
            values = read.ok()?;
        }
        for (chunk, evaluated) in evaluated? {
            if evaluated.changed {
                return None;
            }
            if let (None, Some(h)) = (&head, evaluated.head) {
                head = Some(h);
            }
            for (k, value) in chunk.iter().zip(evaluated.modules) {
                values[*k] = Some(serde_json::from_str::<ModuleOut>(value.get()).ok()?);
                if let Some(key) = &keys.modules[*k] {
                    entries.push(Entry {
                        kind: Kind::Module,
                        key: key.clone(),
                        value,
                    });
                }
            }
        }
        let unread: Vec<usize> = (0..values.len()).filter(|k| values[*k].is_none()).collect();
        if unread.is_empty() || unread == misses {
            break;
        }
        misses = unread;
    }
    if let (Some(key), Some(h), false) = (&keys.head, &head, head_cached) {
        entries.push(Entry {
            kind: Kind::Head,
            key: key.clone(),
            value: serde_json::value::to_raw_value(h).ok()?,
        });
    }
    let head = head?;
    if !head.is_object() {
        return None;
    }
    let head = HeadOut::deserialize(&head).ok()?;
    let node = NodeOut {
        name: head.name,
        settings: head.settings,
        modules: values.into_iter().collect::<Option<Vec<_>>>()?,
    };
    let assembled = crate::assemble::assemble_node(&node, None, inputs.record).ok()?;
    let sources = inputs
        .graph
        .digests
        .iter()
        .map(|(p, d)| (p.clone(), *d))
        .collect();
    Some(Answer {
        assembled,
        sources,
        evaluated: misses.len(),
        live: keys.modules.iter().flatten().cloned().collect(),
        entries,
    })
}

/// Evaluates each chunk's wrapper: here when there is one (or no process to run them in);
/// else each in a process of its own, all at once (measured: evaluating one of them here, beside
/// the processes, makes a cold build of 200 modules some 15% slower). `None` if one fails.
/// `head_known`: the head's value is in hand (from the cache), and an evaluation here need
/// only evaluate the modules: the head's inputs are those it was evaluated from before, so it
/// evaluates as it did, and the modules' values are what a whole evaluation gives them.
fn run_chunks(
    inputs: &Inputs<'_>,
    spine: &Spine,
    chunks: &[Vec<usize>],
    head_known: bool,
) -> Option<Vec<Evaluated>> {
    let here = |chunk: &[usize]| {
        let text = spine.wrapper(chunk);
        crate::eval::evaluate_text_in(
            inputs.node,
            text,
            inputs.library,
            inputs.pinned,
            inputs.tree,
        )
        .and_then(|e| {
            let value = e.to_json().map_err(crate::MeshDiagnostic::new)?;
            Ok((value, e.read_sources()))
        })
        .ok()
    };
    let (Some(processes), [_, _, ..]) = (&inputs.chunks, chunks) else {
        return chunks
            .iter()
            .map(|chunk| {
                let warm = inputs.warm.take();
                let text = spine.wrapper(chunk);
                let (value, read) = warm
                    .and_then(|w| {
                        w.evaluate(
                            inputs.node,
                            inputs.library,
                            inputs.pinned,
                            inputs.tree,
                            text,
                            head_known,
                        )
                    })
                    .or_else(|| here(chunk))?;
                split(inputs, chunk, &value, &read)
            })
            .collect();
    };
    let answers: Vec<Option<(Box<RawValue>, Vec<ReadSource>)>> = std::thread::scope(|scope| {
        let waiting: Vec<_> = chunks
            .iter()
            .map(|chunk| {
                let text = spine.wrapper(chunk);
                scope.spawn(move || processes.evaluate(text))
            })
            .collect();
        waiting
            .into_iter()
            .map(|w| w.join().ok().flatten())
            .collect()
    });
    chunks
        .iter()
        .zip(answers)
        .map(|(chunk, answer)| {
            let (value, read) = answer?;
            split(inputs, chunk, &value, &read)
        })
        .collect()
}

/// A chunk's value, split into the head and its modules' values.
fn split(
    inputs: &Inputs<'_>,
    chunk: &[usize],
    value: &RawValue,
    read: &[ReadSource],
) -> Option<Evaluated> {
    // A file whose text is not what the walk read (it changed in between): the keys would not
    // name what was evaluated.
    let changed = read.iter().any(|(path, digest)| {
        path != inputs.node && inputs.graph.digests.get(path) != Some(digest)
    });
    // Only the modules, evaluated with the head known: an array.
    if value.get().starts_with('[') {
        let modules: Vec<Box<RawValue>> = serde_json::from_str(value.get()).ok()?;
        return (modules.len() == chunk.len()).then_some(Evaluated {
            head: None,
            modules,
            changed,
        });
    }
    let mut node: BTreeMap<String, Box<RawValue>> = serde_json::from_str(value.get()).ok()?;
    let modules: Vec<Box<RawValue>> = serde_json::from_str(node.remove("modules")?.get()).ok()?;
    if modules.len() != chunk.len() {
        return None;
    }
    let head = node
        .into_iter()
        .map(|(field, v)| Some((field, serde_json::from_str(v.get()).ok()?)))
        .collect::<Option<serde_json::Map<String, Value>>>()?;
    Some(Evaluated {
        head: Some(Value::Object(head)),
        modules,
        changed,
    })
}
