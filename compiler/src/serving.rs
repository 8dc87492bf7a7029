//! Evaluators that stay: one child serves one build after another.
//!
//! A build of a node built before evaluates the modules that changed, most often one. In a
//! child of its own ([`crate::bounded`]) that costs the start of the process, and the loading
//! of Nickel's standard library and of the mesh's library, again for every node: more than the
//! evaluation itself. A deploy builds every node of a fleet at once, so the mesh keeps such
//! children (at most one per core, [`max_servers`]) for the builds of one process: each reads
//! one request after another on its stdin, keeps Nickel's standard library loaded and what it
//! parsed of the files the builds import, and answers each request as a child of its own would.
//!
//! The bounds are the same as a single child's:
//!
//! - **Time**: the mesh kills a child still evaluating at the time limit, and the build reports
//!   the limit. The child's CPU limit is set again before each request: the CPU it used so far,
//!   plus the limit.
//! - **Memory**: the child's address space is limited as a single child's is. It retires (ends
//!   once it has answered) when it holds more than half of it, or after [`MAX_BUILDS`] builds.
//!   A request that a child which served others before could not answer, for any reason but the
//!   time limit, is asked again of a child of its own, whose answer (or failure) is the build's:
//!   what one build left in memory never fails the next.
//! - **The mesh killed**: children are started from a thread that lives as long as the process,
//!   so they are killed with it (a child asks the kernel for SIGKILL when the thread that started
//!   it goes).
//! - **Files**: a child drops all it kept once a file it read has another modification time
//!   (Nickel reads a changed file again, but not the files a file it kept imports). A child
//!   idle for [`IDLE_LIMIT`] is not asked again, and one idle for twice that ends: builds that
//!   far apart read every file anew, and a long-running mesh holds no idle children.
//!
//! The protocol: a request is a little-endian `u64` length and that many bytes of JSON (a
//! [`Request`]); an answer is the same framing ([`crate::bounded`]'s), then one byte: 1 when the
//! child takes another request, 0 when it retires.

use std::io::{Read, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::mpsc::{Receiver, RecvTimeoutError, Sender};
use std::sync::{Condvar, Mutex, OnceLock};
use std::time::{Duration, Instant};

use crate::bounded::{BoundedError, Exceeded, Limits, Request, CHILD_ARG};

/// The argument after [`CHILD_ARG`] that makes the child serve builds one after another.
pub const SERVE_ARG: &str = "--serve";

/// How many builds a child serves before it retires.
pub const MAX_BUILDS: usize = 64;

/// How long a child may have waited for a build and still be asked one.
pub const IDLE_LIMIT: Duration = Duration::from_secs(5);

/// Whether builds are served by children that stay: unless `MESH_EVAL_SERVE=0`, which has
/// every build evaluated in a child of its own.
pub fn enabled() -> bool {
    std::env::var_os("MESH_EVAL_SERVE").is_none_or(|v| v != "0")
}

/// How many children serve builds at once: one per core. More builds wait for one of them.
fn max_servers() -> usize {
    std::thread::available_parallelism().map_or(1, std::num::NonZeroUsize::get)
}

/// A child serving builds.
struct Server {
    child: Child,
    stdin: ChildStdin,
    /// Its answers, framed, and whether it takes another request.
    answers: Receiver<(Vec<u8>, bool)>,
    errors: std::thread::JoinHandle<Vec<u8>>,
    served: usize,
    idle_since: Instant,
}

impl Server {
    /// Closes its stdin (it ends), and reaps it on the side.
    fn retire(self) {
        let Server {
            mut child,
            stdin,
            errors,
            ..
        } = self;
        drop(stdin);
        std::thread::spawn(move || {
            let _status = child.wait();
            let _said = errors.join();
        });
    }
}

/// The children serving one program within one set of limits.
struct Pool {
    program: PathBuf,
    limits: Limits,
    idle: Vec<Server>,
    /// How many are alive: idle, serving, or being started.
    live: usize,
    /// How many were started.
    started: usize,
}

static POOLS: Mutex<Vec<Pool>> = Mutex::new(Vec::new());
static FREED: Condvar = Condvar::new();

/// How many children serving builds of `program` this process started so far.
pub fn started(program: &Path) -> usize {
    POOLS
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
        .iter()
        .filter(|p| p.program == program)
        .map(|p| p.started)
        .sum()
}

/// Evaluates `input` (a [`Request`] for `node`, as JSON) in a child serving builds of
/// `program` within `limits`: the child's answer, framed as a single child's stdout is.
pub(crate) fn evaluate(
    program: &Path,
    limits: Limits,
    node: &Path,
    input: &[u8],
) -> Result<Vec<u8>, BoundedError> {
    let server = take(program, limits, node)?;
    let served_before = server.served;
    match ask(server, limits, node, input) {
        Ok((answer, more, mut server)) => {
            server.served += 1;
            server.idle_since = Instant::now();
            if more {
                give_back(program, limits, Some(server));
            } else {
                // It ends by itself: reaped on the side.
                server.retire();
                give_back(program, limits, None);
            }
            Ok(answer)
        }
        Err(e) => {
            give_back(program, limits, None);
            match e {
                // Past the time limit is past it, whatever came before.
                BoundedError::Exceeded {
                    limit: Exceeded::Time(_),
                    ..
                } => Err(e),
                _ if served_before > 0 => {
                    crate::bounded::run_child(program, limits, node, input, true)
                }
                _ => Err(e),
            }
        }
    }
}

/// An idle child of `program` within `limits`, or a new one if fewer than [`max_servers`] are
/// alive; otherwise waits for one.
fn take(program: &Path, limits: Limits, node: &Path) -> Result<Server, BoundedError> {
    let mut pools = POOLS
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    loop {
        let at = match pools
            .iter()
            .position(|p| p.program == program && p.limits == limits)
        {
            Some(at) => at,
            None => {
                pools.push(Pool {
                    program: program.to_owned(),
                    limits,
                    idle: Vec::new(),
                    live: 0,
                    started: 0,
                });
                pools.len() - 1
            }
        };
        let pool = &mut pools[at];
        while let Some(server) = pool.idle.pop() {
            if server.idle_since.elapsed() < IDLE_LIMIT {
                return Ok(server);
            }
            pool.live -= 1;
            server.retire();
        }
        if pool.live < max_servers() {
            pool.live += 1;
            pool.started += 1;
            drop(pools);
            return start(program).map_err(|e| {
                give_back(program, limits, None);
                BoundedError::Failed {
                    node: node.to_owned(),
                    reason: format!("cannot start {}: {e}", program.display()),
                }
            });
        }
        pools = FREED
            .wait(pools)
            .unwrap_or_else(std::sync::PoisonError::into_inner);
    }
}

/// Gives a child back to its pool (`None`: it is gone, or retires), for the next build.
fn give_back(program: &Path, limits: Limits, server: Option<Server>) {
    let mut pools = POOLS
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    if let Some(pool) = pools
        .iter_mut()
        .find(|p| p.program == program && p.limits == limits)
    {
        match server {
            Some(server) => pool.idle.push(server),
            None => pool.live = pool.live.saturating_sub(1),
        }
    }
    drop(pools);
    FREED.notify_one();
}

/// What the thread that starts children is asked: a program, and where to send the child.
type Start = (PathBuf, Sender<std::io::Result<Child>>);

/// Starts a child serving builds of `program`, from the thread that starts them all.
fn start(program: &Path) -> std::io::Result<Server> {
    static STARTER: OnceLock<Mutex<Sender<Start>>> = OnceLock::new();
    let starter = STARTER.get_or_init(|| {
        let (ask, asked) = std::sync::mpsc::channel::<Start>();
        // It lives as long as the process (its sender is never dropped): the children it
        // starts are killed when it goes, which is when the process does.
        let _detached = std::thread::Builder::new()
            .name("mesh-evaluators".into())
            .spawn(move || {
                for (program, reply) in asked {
                    let _gone = reply.send(
                        Command::new(&program)
                            .arg(CHILD_ARG)
                            .arg(SERVE_ARG)
                            .env_remove("RUST_BACKTRACE")
                            .env_remove("RUST_LIB_BACKTRACE")
                            .stdin(Stdio::piped())
                            .stdout(Stdio::piped())
                            .stderr(Stdio::piped())
                            .spawn(),
                    );
                }
            });
        Mutex::new(ask)
    });
    let (reply, child) = std::sync::mpsc::channel();
    starter
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
        .send((program.to_owned(), reply))
        .map_err(|_| std::io::Error::other("the thread that starts evaluators is gone"))?;
    let mut child = child
        .recv()
        .map_err(|_| std::io::Error::other("the thread that starts evaluators is gone"))??;
    let (stdin, mut stdout, mut stderr) =
        match (child.stdin.take(), child.stdout.take(), child.stderr.take()) {
            (Some(i), Some(o), Some(e)) => (i, o, e),
            _ => {
                let _kill = child.kill();
                let _status = child.wait();
                return Err(std::io::Error::other("its pipes were not made"));
            }
        };
    let (answered, answers) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        while let Ok(Some(framed)) = read_frame(&mut stdout) {
            let mut more = [0u8];
            if stdout.read_exact(&mut more).is_err()
                || answered.send((framed, more[0] == 1)).is_err()
            {
                break;
            }
        }
    });
    let errors = std::thread::spawn(move || {
        let mut bytes = Vec::new();
        let _unreadable = stderr.read_to_end(&mut bytes);
        bytes
    });
    Ok(Server {
        child,
        stdin,
        answers,
        errors,
        served: 0,
        idle_since: Instant::now(),
    })
}

/// Asks `server` to evaluate `input`: its answer, whether it takes another request, and the
/// server; or why it gave none (it is then gone).
fn ask(
    mut server: Server,
    limits: Limits,
    node: &Path,
    input: &[u8],
) -> Result<(Vec<u8>, bool, Server), BoundedError> {
    let mut request = Vec::with_capacity(8 + input.len());
    request.extend_from_slice(&(input.len() as u64).to_le_bytes());
    request.extend_from_slice(input);
    // A child that died first (closing its stdin) is reported from its status below.
    let _child_gone = server
        .stdin
        .write_all(&request)
        .and_then(|()| server.stdin.flush());
    let timed_out = match server.answers.recv_timeout(limits.time) {
        Ok((answer, more)) => return Ok((answer, more, server)),
        Err(RecvTimeoutError::Timeout) => {
            // Not reaped yet, so the pid is still the child's.
            let _already_gone = server.child.kill();
            true
        }
        Err(RecvTimeoutError::Disconnected) => false,
    };
    let Server { child, errors, .. } = server;
    crate::bounded::finish_child(child, Ok(Ok(Vec::new())), errors, node, limits, timed_out)
        .and_then(|_| {
            Err(BoundedError::Failed {
                node: node.to_owned(),
                reason: "it ended without an answer".into(),
            })
        })
}

/// Reads one frame: a little-endian `u64` length, then that many bytes; the frame whole (its
/// length included). `None` at the end of the input, before a frame begins.
fn read_frame(input: &mut impl Read) -> std::io::Result<Option<Vec<u8>>> {
    let mut len = [0u8; 8];
    let mut got = 0;
    while got < len.len() {
        match input.read(&mut len[got..])? {
            0 if got == 0 => return Ok(None),
            0 => return Err(std::io::ErrorKind::UnexpectedEof.into()),
            n => got += n,
        }
    }
    let size = usize::try_from(u64::from_le_bytes(len))
        .map_err(|_| std::io::Error::from(std::io::ErrorKind::InvalidData))?;
    let mut framed = Vec::with_capacity(8 + size);
    framed.extend_from_slice(&len);
    input.take(size as u64).read_to_end(&mut framed)?;
    if framed.len() != 8 + size {
        return Err(std::io::ErrorKind::UnexpectedEof.into());
    }
    Ok(Some(framed))
}

/// The child's side: serves requests on stdin until it ends, or until this child retires.
/// Returns the process's exit code: 0 when it ended as it should, 3 when it could not go on.
pub(crate) fn serve_builds() -> u8 {
    crate::memory::SERVING.store(true, std::sync::atomic::Ordering::Relaxed);
    let warm = crate::eval::Warm::start();
    let mut stdin = std::io::stdin().lock();
    let mut stdout = std::io::stdout().lock();
    let mut memory_mib = None;
    for served in 1.. {
        // A child nobody asks goes: the mesh asks only children idle for less than half this.
        let mut waiting = [rustix::event::PollFd::new(
            &stdin,
            rustix::event::PollFlags::IN,
        )];
        let idle = rustix::event::Timespec::try_from(2 * IDLE_LIMIT).ok();
        match rustix::event::poll(&mut waiting, idle.as_ref()) {
            Ok(0) => return 0,
            Ok(_) | Err(rustix::io::Errno::INTR) => {}
            Err(e) => {
                eprintln!("mesh evaluator: waiting for a request: {e}");
                return 3;
            }
        }
        let input = match read_frame(&mut stdin) {
            Ok(Some(framed)) => framed,
            Ok(None) => return 0,
            Err(e) => {
                eprintln!("mesh evaluator: reading a request: {e}");
                return 3;
            }
        };
        let request: Request = match serde_json::from_slice(&input[8..]) {
            Ok(r) => r,
            Err(e) => {
                eprintln!("mesh evaluator: the request cannot be read: {e}");
                return 3;
            }
        };
        drop(input);
        if memory_mib.is_none() {
            // The mesh waits for this answer; if it is gone, so is the reason to compute it.
            let _best_effort = rustix::process::set_parent_process_death_signal(Some(
                rustix::process::Signal::KILL,
            ));
            if let Err(e) = crate::child::limit_memory(request.memory_mib) {
                eprintln!("mesh evaluator: {e}");
                return 3;
            }
            memory_mib = Some(request.memory_mib);
        }
        if request.time_seconds > 0 {
            let used = rustix::time::clock_gettime(rustix::time::ClockId::ProcessCPUTime);
            let used = u64::try_from(used.tv_sec).unwrap_or(0) + 1;
            if let Err(e) = crate::child::limit_cpu(used.saturating_add(request.time_seconds)) {
                eprintln!("mesh evaluator: {e}");
                return 3;
            }
        }
        let answer = match crate::child::answer(&request, warm.as_ref()) {
            Ok(a) => a,
            Err(e) => {
                eprintln!("mesh evaluator: cannot encode the answer: {e}");
                return 3;
            }
        };
        let half = memory_mib.unwrap_or(0).saturating_mul(1024 * 1024) / 2;
        let more = served < MAX_BUILDS && (half == 0 || address_space().is_some_and(|a| a < half));
        let written = stdout
            .write_all(&answer)
            .and_then(|()| stdout.write_all(&[u8::from(more)]))
            .and_then(|()| stdout.flush());
        if let Err(e) = written {
            eprintln!("mesh evaluator: writing the answer: {e}");
            return 3;
        }
        crate::memory::collect_garbage();
        if !more {
            return 0;
        }
    }
    0
}

/// This process's address space in bytes (what `RLIMIT_AS` limits), from `/proc/self/status`.
fn address_space() -> Option<u64> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    let line = status.lines().find(|l| l.starts_with("VmSize:"))?;
    let kib: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(kib * 1024)
}

/// Runs `request` in `program`, bounded by `limits`.
pub(crate) fn evaluate_in_child(
    program: &Path,
    limits: Limits,
    request: &Request,
) -> Result<Result<crate::Kept, crate::BuildError>, BoundedError> {
    let input = serde_json::to_vec(request).map_err(|e| BoundedError::Failed {
        node: request.node.clone(),
        reason: e.to_string(),
    })?;
    let warm = request.per_module
        && request
            .cache_dir
            .as_deref()
            .is_some_and(|dir| crate::cache::modules::has_parsed(dir, &request.node));
    // A node built before: most likely one module to evaluate, in a child that stays.
    let output = if warm && enabled() {
        evaluate(program, limits, &request.node, &input)?
    } else {
        crate::bounded::run_child(program, limits, &request.node, &input, false)?
    };
    crate::bounded::decode(&output).map_err(|e| BoundedError::Failed {
        node: request.node.clone(),
        reason: format!("its answer cannot be read: {e}"),
    })
}
