//! The node's side of `mesh deploy` over its one connection (`mesh store serve`): a request a
//! line on the input, each answered on the output before the next is read, so that a node pays
//! one process (and one login shell) for a deploy, not five:
//!
//! ```text
//! hello                     -> mesh serve 4
//! io-timeout SECONDS        -> ok                               (the bound below, from now)
//! record                    -> record none | record LEN\n<LEN bytes: the node record>
//! current                   -> current none | current {"id", "trigger", "deployed", "waiting"}
//! lacks ID                  -> <generation ID, when it lacks it; else the blobs it lacks>end
//! missing\n<want list>end   -> <the missing ones>end
//! receive\n<object stream>  -> received OBJECTS BYTES            (the stream as `store receive`)
//! signatures ID             -> <the names of the signatures it has for ID>end
//! signature ID LEN\n<sig>    -> ok                               (kept when valid over ID)
//! sequence                  -> sequence none | sequence N        (the newest statement's)
//! offer LEN\n<offer JSON>    -> ok                               (version 3: judged whole)
//! switch ID SECONDS         -> <the deploy's record, JSON, once its switch is done>
//! offer-stage LEN\n<offer>   -> ok                               (version 4: judged whole)
//! stage ID                  -> <what the stage put on the node, JSON, once it is done>
//! ```
//!
//! An offer ([`mesh_lib::statement::Offer`]: the generation, its signatures, the statement naming
//! it for this node) is judged before any object is sent, and kept only when it passes
//! ([`crate::statement::accept_offer`]); a deployer of version 3 sends it first, so a refused deploy sends
//! nothing else.
//!
//! A stage (`mesh deploy --stage`) is offered as `offer-stage`: judged exactly as an offer to
//! switch — the signatures by a signer trusted now, the statement fit, newer than the node's
//! newest and naming the generation — before any object is sent, and the valid signatures kept;
//! but the statement is not kept: a stage puts nothing in force, so the floor of sequences does
//! not move, and the later deploy of the same generation (a statement of its own, signed then)
//! is judged as if the stage had not been. The session remembers what it judged: `stage ID`
//! stages only the generation judged in this session (on a node that trusts signers), judged
//! once more then — an expiry passed meanwhile refuses it — under the node's lock.
//!
//! A request that fails is answered `error MESSAGE`; a refusal of the switch (a generation the
//! node does not trust or cannot decrypt, a lock held) `error refused: MESSAGE`. A stream that
//! cannot be read ends the session, since what follows it cannot be found. With an I/O bound, an
//! input from which no byte comes for that long (a link cut mid-copy, which no FIN announces)
//! ends the session too; the objects that arrived whole are kept.

use std::io::{BufRead, Read, Write};
use std::os::fd::AsFd;
use std::time::Duration;

use mesh_lib::text::{chain, escape};
use mesh_lib::{transfer, GenerationId, Store};
use serde_json::json;

use super::agent::{self, Place, Spawner, StartError};
use super::{refusal, Deploy, DeployState};
use mesh_switch::{ActivateError, Activator};

/// How a session ended other than by the end of its input.
#[derive(Debug, thiserror::Error)]
pub enum ServeError {
    /// The store could not be opened.
    #[error(transparent)]
    Store(#[from] mesh_lib::store::StoreError),
    /// An object stream that could not be read (what follows it cannot be found).
    #[error(transparent)]
    Transfer(#[from] transfer::TransferError),
    /// A request that cannot be framed (a signature's length that is not one).
    #[error("{0}")]
    Request(String),
    /// Reading a request, or answering it (a bound on the input passed, the link gone).
    #[error("{what}: {error}")]
    Io {
        /// What was being done.
        what: &'static str,
        /// Why it failed.
        error: std::io::Error,
    },
}

fn io(what: &'static str) -> impl Fn(std::io::Error) -> ServeError {
    move |error| ServeError::Io { what, error }
}

/// An input read with a bound on how long one read may wait, straight from its descriptor (no
/// buffer between the poll and the read that could hold bytes the poll does not see).
pub struct Timed<F> {
    fd: F,
    /// The bound, if any.
    pub bound: Option<Duration>,
}

impl<F: AsFd> Timed<F> {
    /// `fd`, read with `bound`.
    pub fn new(fd: F, bound: Option<Duration>) -> Self {
        Self { fd, bound }
    }
}

impl<F: AsFd> Read for Timed<F> {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        if let Some(bound) = self.bound {
            let mut fds = [rustix::event::PollFd::new(
                &self.fd,
                rustix::event::PollFlags::IN,
            )];
            let timeout = rustix::event::Timespec::try_from(bound)
                .map_err(|_| std::io::Error::other("an I/O timeout too long"))?;
            if rustix::event::poll(&mut fds, Some(&timeout))? == 0 {
                return Err(std::io::Error::new(
                    std::io::ErrorKind::TimedOut,
                    format!("nothing came for {} s", bound.as_secs()),
                ));
            }
        }
        Ok(rustix::io::read(&self.fd, buf)?)
    }
}

/// Serves a deploy's requests from `input` until it ends (see the module's doc): the node is
/// at `place`, and its agent is started by `spawner`.
pub fn serve<F: AsFd>(
    place: &Place,
    spawner: &dyn Spawner,
    input: Timed<F>,
    out: &mut impl Write,
) -> Result<(), ServeError> {
    let store = Store::open(&place.state)?;
    let mut input = std::io::BufReader::with_capacity(1 << 16, input);
    // The offer to stage judged in this session, if one passed: what `stage` may stage.
    let mut to_stage: Option<ToStage> = None;
    let mut answer = |bytes: &[u8]| {
        out.write_all(bytes)
            .and_then(|()| out.flush())
            .map_err(io("answering"))
    };
    loop {
        let mut line = String::new();
        if input
            .read_line(&mut line)
            .map_err(io("reading a request"))?
            == 0
        {
            return Ok(());
        }
        let words: Vec<&str> = line.split_whitespace().collect();
        match words.as_slice() {
            ["record"] => {
                let path = mesh_lib::record::record_path(&place.state);
                match std::fs::read(&path) {
                    Ok(bytes) => {
                        answer(format!("record {}\n", bytes.len()).as_bytes())?;
                        answer(&bytes)?;
                    }
                    Err(e) if e.kind() == std::io::ErrorKind::NotFound => answer(b"record none\n")?,
                    Err(e) => answer(format!("error {}: {e}\n", path.display()).as_bytes())?,
                }
            }
            ["missing"] => {
                let mut list = Vec::new();
                loop {
                    let mut l = String::new();
                    if input.read_line(&mut l).map_err(io("reading a list"))? == 0 || l == "end\n" {
                        break;
                    }
                    list.extend_from_slice(l.as_bytes());
                }
                match transfer::read_list(list.as_slice()) {
                    Ok(wanted) => answer(&listed(&transfer::missing(&store, &wanted)))?,
                    Err(e) => answer(format!("error {e}\n").as_bytes())?,
                }
            }
            ["hello"] => answer(b"mesh serve 4\n")?,
            ["io-timeout", seconds] => match seconds.parse::<u64>() {
                Ok(s) if s > 0 => {
                    input.get_mut().bound = Some(Duration::from_secs(s));
                    answer(b"ok\n")?
                }
                _ => answer(
                    format!("error `{}` is not a number of seconds\n", escape(seconds)).as_bytes(),
                )?,
            },
            ["current"] => {
                let text = match current(place) {
                    Ok(Some(v)) => format!("current {v}\n"),
                    Ok(None) => "current none\n".to_owned(),
                    Err(e) => format!("error {}\n", chain(&e).replace('\n', " ")),
                };
                answer(text.as_bytes())?;
            }
            ["lacks", id] => {
                let text = match id.parse::<GenerationId>() {
                    Ok(id) if !store.has_generation(&id) => {
                        format!("generation {id}\nend\n").into_bytes()
                    }
                    Ok(id) => match store.generation(&id) {
                        Ok(g) => {
                            let wanted: Vec<transfer::Object> = g
                                .sent_blobs()
                                .into_iter()
                                .map(transfer::Object::Blob)
                                .collect();
                            listed(&transfer::missing(&store, &wanted))
                        }
                        Err(e) => format!("error {e}\n").into_bytes(),
                    },
                    Err(_) => not_an_id(id),
                };
                answer(&text)?;
            }
            ["signatures", id] => {
                let text = match id.parse::<GenerationId>() {
                    Ok(id) => {
                        let mut text = String::new();
                        for (name, _) in store.signatures(&id)? {
                            text.push_str(&format!("{name}\n"));
                        }
                        (text + "end\n").into_bytes()
                    }
                    Err(_) => not_an_id(id),
                };
                answer(&text)?;
            }
            ["signature", id, len] => {
                let len: usize = match len.parse() {
                    Ok(l) if l <= 64 << 10 => l,
                    _ => {
                        return Err(ServeError::Request(
                            "a signature's length is not one".into(),
                        ))
                    }
                };
                let mut bytes = vec![0; len];
                input
                    .read_exact(&mut bytes)
                    .map_err(io("reading a signature"))?;
                let text = match id.parse::<GenerationId>() {
                    Ok(id) => {
                        match mesh_lib::trust::Signature::parse(&String::from_utf8_lossy(&bytes))
                            .and_then(|s| s.verify(&id).map(|()| s))
                        {
                            Ok(sig) => match store.put_signature(&id, sig.armored()) {
                                Ok(_) => b"ok\n".to_vec(),
                                Err(e) => format!("error {e}\n").into_bytes(),
                            },
                            Err(e) => format!("error {e}\n").into_bytes(),
                        }
                    }
                    Err(_) => not_an_id(id),
                };
                answer(&text)?;
            }
            ["sequence"] => {
                let text = match crate::statement::Kept::load(&place.state) {
                    Ok(kept) => match kept.and_then(|k| k.statement()) {
                        Some(s) => format!("sequence {}\n", s.sequence),
                        None => "sequence none\n".to_owned(),
                    },
                    Err(e) => format!("error {}\n", chain(&e).replace('\n', " ")),
                };
                answer(text.as_bytes())?;
            }
            ["offer", len] => {
                let bytes = read_offer(&mut input, len)?;
                answer(format!("{}\n", offer(place, &bytes).replace('\n', " ")).as_bytes())?;
            }
            ["offer-stage", len] => {
                let bytes = read_offer(&mut input, len)?;
                let (said, judged) = offer_to_stage(place, &bytes);
                to_stage = judged;
                answer(format!("{}\n", said.replace('\n', " ")).as_bytes())?;
            }
            ["stage", id] => {
                let text = match id.parse::<GenerationId>() {
                    Ok(id) => stage(place, id, to_stage.as_ref()),
                    Err(_) => String::from_utf8_lossy(&not_an_id(id))
                        .trim_end()
                        .to_owned(),
                };
                answer(format!("{}\n", text.replace('\n', " ")).as_bytes())?;
            }
            ["receive"] => match transfer::receive(&store, &mut input) {
                Ok(got) => answer(format!("received {} {}\n", got.objects, got.bytes).as_bytes())?,
                Err(e) => {
                    answer(format!("error {e}\n").as_bytes())?;
                    return Err(e.into());
                }
            },
            ["switch", id, seconds] => {
                let text = match seconds.parse::<u64>() {
                    Ok(s) if (1..=86400).contains(&s) => switch(place, spawner, id, s),
                    _ => format!("error `{seconds}` is not a number of seconds from 1 to 86400"),
                };
                answer(format!("{}\n", text.replace('\n', " ")).as_bytes())?;
            }
            [] => {}
            _ => answer(format!("error unknown request `{}`\n", escape(line.trim())).as_bytes())?,
        }
    }
}

/// The `LEN` bytes of an `offer LEN` (or `offer-stage LEN`) request, at most 1 MiB.
fn read_offer(input: &mut impl Read, len: &str) -> Result<Vec<u8>, ServeError> {
    let len: usize = match len.parse() {
        Ok(l) if l <= 1 << 20 => l,
        _ => return Err(ServeError::Request("an offer's length is not one".into())),
    };
    let mut bytes = vec![0; len];
    input
        .read_exact(&mut bytes)
        .map_err(io("reading an offer"))?;
    Ok(bytes)
}

/// `offer LEN`: judges the offer and keeps it when it passes: `ok`, or `error refused: …`
/// (nothing kept) / `error …`.
fn offer(place: &Place, bytes: &[u8]) -> String {
    let offer: mesh_lib::statement::Offer = match serde_json::from_slice(bytes) {
        Ok(o) => o,
        Err(e) => return format!("error not an offer: {e}"),
    };
    let judged =
        Activator::inspect(&place.state, &place.root, place.netns.clone()).and_then(|node| {
            crate::statement::accept_offer(&node, &offer, std::time::SystemTime::now())
        });
    match judged {
        Ok(()) => "ok".to_owned(),
        Err(e) if refusal(&e) => format!("error refused: {}", chain(&e)),
        Err(e) => format!("error {}", chain(&e)),
    }
}

/// An offer to stage that passed, as the session remembers it until its `stage`.
struct ToStage {
    /// The generation offered.
    generation: GenerationId,
    /// Its statement, judged fit (`None`: the node trusts no signer).
    statement: Option<mesh_lib::statement::Signed>,
}

/// `offer-stage LEN`: judges the offer as `offer` does, keeping its valid signatures but not
/// its statement (see the module's doc): `ok` and what passed, or `error refused: …` (nothing
/// kept) / `error …`.
fn offer_to_stage(place: &Place, bytes: &[u8]) -> (String, Option<ToStage>) {
    let offer: mesh_lib::statement::Offer = match serde_json::from_slice(bytes) {
        Ok(o) => o,
        Err(e) => return (format!("error not an offer: {e}"), None),
    };
    let judged =
        Activator::inspect(&place.state, &place.root, place.netns.clone()).and_then(|node| {
            crate::statement::judge_offer_to_stage(&node, &offer, std::time::SystemTime::now())
        });
    match judged {
        Ok(fit) => (
            "ok".to_owned(),
            Some(ToStage {
                generation: offer.generation,
                statement: fit.map(|f| f.signed),
            }),
        ),
        Err(e) if refusal(&e) => (format!("error refused: {}", chain(&e)), None),
        Err(e) => (format!("error {}", chain(&e)), None),
    }
}

/// `stage ID`: stages generation `id` under the node's lock — on a node that trusts signers,
/// only the one whose offer passed in this session, its statement judged again now and its
/// signatures by a signer trusted now: what was staged (JSON), or `error refused: …` /
/// `error …`.
fn stage(place: &Place, id: GenerationId, judged: Option<&ToStage>) -> String {
    let staged = Activator::open(&place.state, &place.root, place.netns.clone()).and_then(|node| {
        if crate::trust::signers(&node)?.is_some() {
            let statement = match judged {
                Some(j) if j.generation == id => j.statement.as_ref(),
                _ => None,
            }
            .ok_or(ActivateError::Unstated {
                target: id,
                stated: None,
            })?;
            crate::statement::judge(&node, statement, None, std::time::SystemTime::now())?;
            crate::trust::check_now(&node, &id)?;
        }
        let generation = node.store.generation(&id)?;
        node.stage(id, &generation)
    });
    match staged {
        Ok(s) => serde_json::to_string(&s).expect("a stage encodes"),
        Err(e) if refusal(&e) => format!("error refused: {}", chain(&e)),
        Err(e) => format!("error {}", chain(&e)),
    }
}

/// A list of objects, as a request's answer: the list, then `end`.
fn listed(objects: &[transfer::Object]) -> Vec<u8> {
    let mut text = Vec::new();
    transfer::write_list(&mut text, objects).expect("writing to memory");
    text.extend_from_slice(b"end\n");
    text
}

fn not_an_id(id: &str) -> Vec<u8> {
    format!("error `{}` is not a generation id\n", escape(id)).into_bytes()
}

/// `switch ID SECONDS`: arms the deploy, starts its agent and waits for its switch to be done:
/// the deploy as the deployer is told it ([`told`]), or `error …` (`error refused: …` when the
/// node refused the generation before anything moved, or its lock is held).
fn switch(place: &Place, spawner: &dyn Spawner, id: &str, seconds: u64) -> String {
    let started = agent::arm(place, spawner, id, seconds, agent::Asked::FromElsewhere);
    match started {
        Ok(d) => match agent::switch_done(&place.state, &d.token) {
            Ok(d) => told(&place.state, &d).to_string(),
            Err(e) => format!("error {e}"),
        },
        Err(StartError::Refused(e)) if refusal(&e) => format!("error refused: {}", chain(&e)),
        Err(StartError::Refused(e)) => format!("error {}", chain(&e)),
        Err(StartError::Io(e)) => format!("error {e}"),
    }
}

/// The generation in force, as `current` answers it: its id, what put it in force (the
/// profile log's trigger), whether a deploy recorded here switched to it, and the deploy that
/// waits for its confirmation, if one does.
pub fn current(place: &Place) -> Result<Option<serde_json::Value>, ActivateError> {
    let node = Activator::inspect(&place.state, &place.root, place.netns.clone())?;
    Ok(crate::status::in_force(&node)?.map(
        |c| json!({ "id": c.id, "trigger": c.trigger, "deployed": c.deployed, "waiting": c.waiting }),
    ))
}

/// How many lines of a deploy's log a deployer is told when it did not end as deployed.
const LOG_LINES: usize = 12;

/// A deploy as the deployer is told it: its record, the generation in force on the node now
/// (read, not assumed), and — when it failed or reverted — the last lines of its log.
pub fn told(state: &std::path::Path, deploy: &Deploy) -> serde_json::Value {
    let mut v = serde_json::to_value(deploy).unwrap_or_default();
    let in_force = mesh_node::profile::Profile::open(state)
        .ok()
        .and_then(|p| p.current().ok().flatten())
        .map(|(_, id)| id.to_string());
    v["in_force"] = json!(in_force);
    if matches!(deploy.state, DeployState::Reverted | DeployState::Failed) {
        let log =
            std::fs::read_to_string(super::log_path(state, &deploy.token)).unwrap_or_default();
        let lines: Vec<String> = log
            .lines()
            .filter(|l| !l.trim().is_empty())
            .map(|l| escape(l).into_owned())
            .collect();
        v["log"] = json!(lines[lines.len().saturating_sub(LOG_LINES)..]);
    }
    v
}

#[cfg(test)]
mod tests {
    use super::*;
    use mesh_lib::BlobHash;
    use std::process::Command;

    /// A spawner for sessions that arm nothing.
    struct Nothing;

    impl Spawner for Nothing {
        fn agent(&self, _: &str) -> Command {
            unreachable!("no switch was asked for")
        }
        fn step(&self, _: &str, _: agent::Step) -> Command {
            unreachable!("no switch was asked for")
        }
    }

    /// A node in `dir`, nothing in its store.
    fn place(dir: &std::path::Path) -> Place {
        Place {
            state: dir.join("state"),
            root: dir.join("root"),
            netns: None,
            settle: Duration::ZERO,
        }
    }

    fn session(place: &Place, requests: &str) -> (Result<(), ServeError>, String) {
        let file = place.state.with_extension("requests");
        std::fs::write(&file, requests).unwrap();
        let input = Timed::new(std::fs::File::open(&file).unwrap(), None);
        let mut out = Vec::new();
        let ended = serve(place, &Nothing, input, &mut out);
        (ended, String::from_utf8(out).unwrap())
    }

    /// Each request is answered in turn, a bad one with `error …` (its text escaped) and the
    /// session going on, until the input ends.
    #[test]
    fn each_request_is_answered_in_turn() {
        let dir = tempfile::tempdir().unwrap();
        let place = place(dir.path());
        std::fs::create_dir_all(&place.root).unwrap();
        let store = Store::open(&place.state).unwrap();
        let kept = store.put_blob(b"kept\n", true).unwrap();
        let lacking = BlobHash::of(b"lacking\n");
        let id = GenerationId::of(b"a generation this node lacks");
        let requests = format!(
            "hello\nrecord\ncurrent\nlacks {id}\nsignatures {id}\nmissing\n{}\n{}\nend\n\
             io-timeout soon\nio-timeout 5\nlacks nope\nswitch {id} 0\nunheard-of \u{1b}[2J\n\n",
            transfer::Object::Blob(kept),
            transfer::Object::Blob(lacking),
        );
        let (ended, said) = session(&place, &requests);
        assert!(ended.is_ok(), "{ended:?}");
        assert_eq!(
            said,
            format!(
                "mesh serve 4\nrecord none\ncurrent none\ngeneration {id}\nend\nend\n{}\nend\n\
                 error `soon` is not a number of seconds\nok\n\
                 error `nope` is not a generation id\n\
                 error `0` is not a number of seconds from 1 to 86400\n\
                 error unknown request `unheard-of \\u{{1b}}[2J`\n",
                transfer::Object::Blob(lacking),
            )
        );
    }

    /// On a node that trusts signers, `stage ID` stages only the generation whose offer to
    /// stage passed in this session: asked with none, after one refused (unsigned), or after
    /// one for another generation, it is refused. An offer to stage that passes keeps its
    /// signatures but not its statement: the floor of sequences does not move.
    #[test]
    fn a_stage_is_of_the_offer_its_session_judged_and_keeps_no_statement() {
        let dir = tempfile::tempdir().unwrap();
        let place = place(dir.path());
        let seed = blake3::hash(b"a signer the node trusts");
        let key =
            ssh_key::PrivateKey::from(ssh_key::private::Ed25519Keypair::from_seed(seed.as_bytes()));
        let signers = place.root.join("etc/mesh");
        std::fs::create_dir_all(&signers).unwrap();
        std::fs::write(
            signers.join("trusted-signers"),
            format!("ci {}\n", key.public_key().to_openssh().unwrap()),
        )
        .unwrap();
        let store = Store::open(&place.state).unwrap();
        let (id, other) = (GenerationId::of(b"staged"), GenerationId::of(b"other"));
        let offer = |generation: GenerationId, signed: bool| {
            let statement = mesh_lib::statement::Statement::new(
                "n1",
                Some(generation),
                1,
                std::time::SystemTime::now(),
                Duration::from_secs(3600),
            )
            .text();
            let offer = mesh_lib::statement::Offer {
                generation,
                signatures: if signed {
                    vec![mesh_lib::trust::sign(&key, &generation).unwrap()]
                } else {
                    Vec::new()
                },
                statement: Some(mesh_lib::statement::Signed {
                    signatures: vec![
                        mesh_lib::trust::sign_message(&key, statement.as_bytes()).unwrap()
                    ],
                    statement,
                }),
            };
            let json = serde_json::to_string(&offer).unwrap();
            format!("offer-stage {}\n{json}", json.len())
        };
        let requests = [
            format!("stage {id}\n"),
            offer(id, false),
            format!("stage {id}\n"),
            offer(other, true),
            format!("stage {id}\n"),
            offer(id, true),
        ]
        .concat();
        let (ended, said) = session(&place, &requests);
        assert!(ended.is_ok(), "{ended:?}");
        let answers: Vec<&str> = said.lines().collect();
        assert_eq!(answers.len(), 6, "{said}");
        for (n, answer) in answers.iter().enumerate() {
            match n {
                0 | 2 | 4 => assert!(
                    answer.starts_with(&format!(
                        "error refused: no statement this node accepted names {id}"
                    )),
                    "{n}: {answer}"
                ),
                1 => assert!(answer.starts_with("error refused: "), "{n}: {answer}"),
                _ => assert_eq!(*answer, "ok", "{n}"),
            }
        }
        assert!(
            !crate::statement::path(&place.state).exists(),
            "a stage kept its statement"
        );
        assert_eq!(store.signatures(&id).unwrap().len(), 1);
    }

    /// A signature whose length is not one ends the session: what follows cannot be found.
    #[test]
    fn a_request_that_cannot_be_framed_ends_the_session() {
        let dir = tempfile::tempdir().unwrap();
        let place = place(dir.path());
        let id = GenerationId::of(b"g");
        let (ended, said) = session(&place, &format!("hello\nsignature {id} lots\nhello\n"));
        assert!(matches!(ended, Err(ServeError::Request(_))), "{ended:?}");
        assert_eq!(said, "mesh serve 4\n");
    }
}
