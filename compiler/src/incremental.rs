//! One module changed, one module evaluated.
//!
//! A node's modules are found in its declaration's text ([`crate::spine`]); each has a key in
//! the per-module cache ([`crate::cache::modules`]) made of everything its value depends on.
//! The modules whose keys miss are evaluated — in declarations of their own, the node's with
//! only those modules ([`Spine::wrapper`]), split across the machine's cores, one Nickel
//! evaluation per process (Nickel's evaluator is not `Send`, and its interner is one lock) —
//! and the others are read from the cache, and added to the generation while the misses are
//! evaluated ([`Assembly`]: the order modules are added in changes nothing). The generation is
//! byte for byte the one a whole evaluation gives.
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

use crate::assemble::{Assembled, Assembly, ModuleOut, RecordSource, SettingsOut};
use crate::cache::modules::{self, Entry, Kind};
use crate::eval::ReadSource;
use crate::imports::{Graph, Tree};
use crate::spine::Spine;

/// Fewer misses than this per process are evaluated in fewer processes: each process starts,
/// and loads the standard library and the contracts, again.
const MIN_PER_PROCESS: usize = 4;

/// The stack of the thread the missing modules are evaluated from (and on, when not in a
/// process or evaluator of their own): a main thread's, which is where a whole evaluation
/// runs. (A thread's default, 2 MiB, is outgrown by a deep evaluation before its memory limit.)
const EVALUATING_STACK: usize = 8 << 20;

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
    /// Given the generation once the modules read from the cache are in it, while the others
    /// are still evaluated: the build stores their blobs then.
    pub early: Option<&'a (dyn Fn(&Assembly<'_>) + Sync)>,
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
/// `warm`: an evaluator already loading the standard library, for modules evaluated here.
pub(crate) fn evaluate(inputs: &Inputs<'_>, warm: Option<&crate::eval::Warm>) -> Option<Answer> {
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
    // The modules already added to the generation, while the others were evaluated.
    let mut assembly: Option<Assembly<'_>> = None;
    let mut added = vec![false; keys.modules.len()];
    let mut entries = Vec::new();
    let mut misses: Vec<usize> = (0..present.len()).filter(|k| !present[*k]).collect();
    loop {
        let first = values.is_empty();
        let (evaluated, refused) = std::thread::scope(|scope| {
            let (misses, spine, head_known) = (&misses, &spine, head.is_some());
            let evaluating = std::thread::Builder::new()
                .name("mesh-modules".into())
                .stack_size(EVALUATING_STACK)
                .spawn_scoped(scope, move || {
                    if misses.is_empty() && head_known {
                        return Some(Vec::new());
                    }
                    let threads = inputs.threads.min(misses.len() / MIN_PER_PROCESS).max(1);
                    let chunks: Vec<Vec<usize>> = (0..threads)
                        .map(|t| misses.iter().copied().skip(t).step_by(threads).collect())
                        .collect();
                    run_chunks(inputs, spine, &chunks, head_known, warm)
                        .map(|results| chunks.into_iter().zip(results).collect::<Vec<_>>())
                });
            // Meanwhile the cached modules are read and, with the head known, added to the
            // generation.
            let mut refused = false;
            if first {
                values = read();
                if let Some(h) = &head {
                    assembly = assembly_of(h, inputs.record);
                    refused = assembly
                        .as_mut()
                        .is_none_or(|a| add(a, &values, &mut added).is_none());
                }
                if let (Some(a), Some(early), false) = (&assembly, inputs.early, refused) {
                    early(a);
                }
            }
            let evaluated = match evaluating {
                Ok(thread) => thread.join().ok().flatten(),
                Err(_) => None,
            };
            (evaluated, refused)
        });
        if refused {
            return None;
        }
        for (chunk, evaluated) in evaluated? {
            if evaluated.changed {
                return None;
            }
            if head.is_none() {
                head = evaluated.head;
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
    let mut assembly = match assembly {
        Some(a) => a,
        None => assembly_of(head.as_ref()?, inputs.record)?,
    };
    if values.iter().any(Option::is_none) {
        return None;
    }
    add(&mut assembly, &values, &mut added)?;
    let assembled = assembly.finish().ok()?;
    let sources = inputs
        .graph
        .digests
        .iter()
        .map(|(p, d)| (p.clone(), *d))
        .collect();
    let answer = Answer {
        assembled,
        sources,
        evaluated: misses.len(),
        live: keys.modules.iter().flatten().cloned().collect(),
        entries,
    };
    crate::memory::discard((values, bundles, spine, keys));
    Some(answer)
}

/// The generation of the node whose head is `head`, to add its modules to.
fn assembly_of<'a>(head: &Value, record: Option<&'a RecordSource<'a>>) -> Option<Assembly<'a>> {
    if !head.is_object() {
        return None;
    }
    let head = HeadOut::deserialize(head).ok()?;
    Assembly::new(&head.name, &head.settings, None, record).ok()
}

/// Adds the modules of `values` not `added` yet to `assembly`; `None` if one is refused.
fn add(
    assembly: &mut Assembly<'_>,
    values: &[Option<ModuleOut>],
    added: &mut [bool],
) -> Option<()> {
    for (k, v) in values.iter().enumerate() {
        if let (Some(v), false) = (v, added[k]) {
            assembly.add(k, v).ok()?;
            added[k] = true;
        }
    }
    Some(())
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
    warm: Option<&crate::eval::Warm>,
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
