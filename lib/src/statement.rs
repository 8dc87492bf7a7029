//! Statements: what a node is told to run, from elsewhere, signed whole.
//!
//! A signature over a generation's id says *what* a generation is; it does not say *which node*
//! should run it, *whether it is still the newest word*, nor *until when* it holds — so a
//! registry (or whoever holds a deploy key) could replay an old signed generation, withhold
//! every new one, or hand a node another node's. A statement closes that (TUF's rollback,
//! freeze and mix-and-match attacks): a short text, signed in the namespace of
//! [`crate::trust`], that binds
//!
//! ```text
//! mesh-statement 1
//! node web-1
//! generation b3:…            (or `generation none`: the node's tag is withdrawn)
//! sequence 1764990000123
//! expires 2026-12-12T03:00:00Z
//! ```
//!
//! A node accepts a statement only when a signer it trusts signed it, it names this node, its
//! sequence is above the highest the node accepted (the very statement again is no news, not a
//! refusal), and it has not expired ([`Statement::judge`]). Going back is a *new* statement,
//! with a higher sequence, naming the old generation. The sequence a signer gives is the
//! signing time in milliseconds, or one more than the highest it knows of, whichever is larger
//! ([`next_sequence`]): signers with fair clocks never go backwards, and none needs a counter
//! of its own. A statement's text is canonical: it parses only as it renders, byte for byte, so
//! one statement has one text and one set of signatures over it.

use std::fmt;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use serde::{Deserialize, Serialize};

use crate::id::GenerationId;
use crate::trust::{Signature, TrustedSigners};

/// The first line of every statement (its format, version 1).
const HEADER: &str = "mesh-statement 1";

/// How long a statement holds unless the fleet or the command says otherwise.
pub const DEFAULT_VALID_FOR: Duration = Duration::from_secs(7 * 24 * 3600);

/// What a signer tells a node.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Statement {
    /// The node it is for.
    pub node: String,
    /// The generation it should run; `None`: its tag is withdrawn, it should run nothing new.
    pub generation: Option<GenerationId>,
    /// Grows with every statement for the node.
    pub sequence: u64,
    /// When it stops holding, in seconds since the epoch.
    pub expires: u64,
}

/// A statement as it travels: its text, and the signatures over it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Signed {
    /// The canonical text ([`Statement::text`]).
    pub statement: String,
    /// Armored `sshsig`s over the text.
    pub signatures: Vec<String>,
}

/// What a deploy offers a node before it sends a single object: the generation, its
/// signatures, and the statement that names it for the node (none from a deployer that signs
/// nothing; a node that trusts signers refuses that).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Offer {
    /// The generation.
    pub generation: GenerationId,
    /// Armored signatures over its id.
    pub signatures: Vec<String>,
    /// The statement.
    pub statement: Option<Signed>,
}

/// Why a statement is not one to act on.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum StatementError {
    /// Not a statement's text.
    #[error("not a statement of the mesh: {0}")]
    Malformed(String),
    /// For another node.
    #[error("the statement is for node {stated}, not for {here}: a tag or a deploy pointed at another node's generation")]
    OtherNode {
        /// The node it names.
        stated: String,
        /// This node.
        here: String,
    },
    /// Not newer than what the node accepted.
    #[error("the statement's sequence {sequence} is not above {highest}, the highest this node accepted: an old statement replayed (going back takes a new statement from a signer)")]
    Stale {
        /// Its sequence.
        sequence: u64,
        /// The node's highest.
        highest: u64,
    },
    /// Past its expiry.
    #[error("the statement expired at {}: nothing newer was signed for this node since (a registry withholding new statements, or a fleet that stopped signing)", stamp(*.expires))]
    Expired {
        /// When it expired (seconds since the epoch).
        expires: u64,
    },
    /// Signed by nobody the node trusts.
    #[error("{0}")]
    Untrusted(String),
    /// It names another generation than the one it came with.
    #[error("the statement names {stated}, not {offered}, the generation it came with")]
    Elsewhere {
        /// What it names (`none`: a withdrawal).
        stated: String,
        /// What came with it (`none`: a withdrawal).
        offered: String,
    },
    /// None came, and the node trusts signers.
    #[error("no statement came with {0}: a node that trusts signers switches from elsewhere only to what a signer stated for it, with a sequence and an expiry (`mesh deploy --sign`, `mesh push --sign`)")]
    Missing(GenerationId),
}

impl Statement {
    /// A statement for `node`, naming `generation`, with `sequence`, valid for `valid_for` from
    /// `now`.
    pub fn new(
        node: &str,
        generation: Option<GenerationId>,
        sequence: u64,
        now: SystemTime,
        valid_for: Duration,
    ) -> Self {
        Self {
            node: node.to_owned(),
            generation,
            sequence,
            expires: seconds(now).saturating_add(valid_for.as_secs()),
        }
    }

    /// Its canonical text: what is signed.
    pub fn text(&self) -> String {
        format!(
            "{HEADER}\nnode {}\ngeneration {}\nsequence {}\nexpires {}\n",
            self.node,
            self.generation
                .map_or_else(|| "none".to_owned(), |g| g.to_string()),
            self.sequence,
            stamp(self.expires),
        )
    }

    /// Reads a statement's text: only a canonical one (it renders back to the same bytes).
    pub fn parse(text: &str) -> Result<Self, StatementError> {
        let bad = |why: &str| StatementError::Malformed(why.to_owned());
        let mut lines = text
            .strip_suffix('\n')
            .ok_or_else(|| bad("no final newline"))?
            .split('\n');
        if lines.next() != Some(HEADER) {
            return Err(bad("it does not begin with `mesh-statement 1`"));
        }
        let mut field = |name: &str| {
            lines
                .next()
                .and_then(|l| l.strip_prefix(name))
                .and_then(|l| l.strip_prefix(' '))
                .ok_or_else(|| {
                    StatementError::Malformed(format!("no `{name}` line where it belongs"))
                })
        };
        let node = field("node")?.to_owned();
        let generation = match field("generation")? {
            "none" => None,
            g => Some(
                g.parse()
                    .map_err(|e| bad(&format!("its generation: {e}")))?,
            ),
        };
        let sequence = field("sequence")?
            .parse()
            .map_err(|_| bad("its sequence is not a number"))?;
        let expires = humantime::parse_rfc3339(field("expires")?)
            .map_err(|e| bad(&format!("its expiry: {e}")))?;
        let statement = Self {
            node,
            generation,
            sequence,
            expires: seconds(expires),
        };
        if lines.next().is_some() || statement.text() != text {
            return Err(bad("it is not in its canonical form"));
        }
        if crate::model::NodeName::new(&statement.node).is_err() {
            return Err(bad("its node is not a node's name"));
        }
        Ok(statement)
    }

    /// Whether it has expired at `now`.
    pub fn expired(&self, now: SystemTime) -> bool {
        seconds(now) >= self.expires
    }

    /// Its expiry, RFC 3339.
    pub fn expires_stamp(&self) -> String {
        stamp(self.expires)
    }

    /// Judges `signed` for the node `here` (`None`: a node that knows no name of its own yet
    /// takes the one stated), which accepted up to `highest` (and, with it, the statement
    /// `newest`), at `now`: the statement and who signed it when it is one to act on. The very
    /// statement the node accepted last is [`Judged::Again`]: no news, and still checked for
    /// expiry.
    pub fn judge(
        signed: &Signed,
        signers: &TrustedSigners,
        here: Option<&str>,
        newest: Option<&Signed>,
        now: SystemTime,
    ) -> Result<Judged, StatementError> {
        let statement = Self::parse(&signed.statement)?;
        let signatures: Vec<Signature> = signed
            .signatures
            .iter()
            .filter_map(|s| Signature::parse(s).ok())
            .collect();
        let what = format!(
            "the statement (node {}, sequence {})",
            crate::text::escape(&statement.node),
            statement.sequence
        );
        let signer = signers
            .accept_message(&what, signed.statement.as_bytes(), &signatures, now)
            .map_err(|r| StatementError::Untrusted(r.to_string()))?
            .to_string();
        if let Some(here) = here {
            if statement.node != here {
                return Err(StatementError::OtherNode {
                    stated: statement.node,
                    here: here.to_owned(),
                });
            }
        }
        if statement.expired(now) {
            return Err(StatementError::Expired {
                expires: statement.expires,
            });
        }
        if let Some(newest) = newest.and_then(|n| Self::parse(&n.statement).ok()) {
            if newest.text() == statement.text() {
                return Ok(Judged::Again { statement, signer });
            }
            if statement.sequence <= newest.sequence {
                return Err(StatementError::Stale {
                    sequence: statement.sequence,
                    highest: newest.sequence,
                });
            }
        }
        Ok(Judged::New { statement, signer })
    }
}

/// A statement that may be acted on.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Judged {
    /// Newer than any the node accepted.
    New {
        /// It.
        statement: Statement,
        /// Who signed it (`name (SHA256:…)`).
        signer: String,
    },
    /// The one the node accepted last, again.
    Again {
        /// It.
        statement: Statement,
        /// Who signed it.
        signer: String,
    },
}

impl Judged {
    /// The statement.
    pub fn statement(&self) -> &Statement {
        match self {
            Judged::New { statement, .. } | Judged::Again { statement, .. } => statement,
        }
    }
}

impl fmt::Display for Statement {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "statement {} for {}: {}, expires {}",
            self.sequence,
            crate::text::escape(&self.node),
            naming(self.generation),
            stamp(self.expires)
        )
    }
}

/// What a statement names, in words: the generation's id, or `none (a withdrawal)`.
pub fn naming(generation: Option<GenerationId>) -> String {
    generation.map_or_else(|| "none (a withdrawal)".to_owned(), |g| g.to_string())
}

/// The sequence a signer gives a node's next statement: `now` in milliseconds, or one more
/// than `highest` (the highest it knows of), whichever is larger.
pub fn next_sequence(highest: Option<u64>, now: SystemTime) -> u64 {
    let millis = u64::try_from(
        now.duration_since(UNIX_EPOCH)
            .unwrap_or_default()
            .as_millis(),
    )
    .unwrap_or(u64::MAX);
    highest.map_or(millis, |h| millis.max(h.saturating_add(1)))
}

fn seconds(t: SystemTime) -> u64 {
    t.duration_since(UNIX_EPOCH).unwrap_or_default().as_secs()
}

/// RFC 3339, UTC, to the second.
pub fn stamp(seconds: u64) -> String {
    humantime::format_rfc3339_seconds(UNIX_EPOCH + Duration::from_secs(seconds)).to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key(seed: &[u8]) -> ssh_key::PrivateKey {
        let seed = blake3::hash(seed);
        ssh_key::PrivateKey::from(ssh_key::private::Ed25519Keypair::from_seed(seed.as_bytes()))
    }

    fn signers(key: &ssh_key::PrivateKey) -> TrustedSigners {
        TrustedSigners::parse(&format!("ci {}\n", key.public_key().to_openssh().unwrap())).unwrap()
    }

    fn signed(statement: &Statement, key: &ssh_key::PrivateKey) -> Signed {
        let text = statement.text();
        Signed {
            signatures: vec![crate::trust::sign_message(key, text.as_bytes()).unwrap()],
            statement: text,
        }
    }

    fn at(seconds: u64) -> SystemTime {
        UNIX_EPOCH + Duration::from_secs(seconds)
    }

    /// A statement's text is canonical: it renders and parses back to itself; anything else
    /// (another order, a space too many, a bad name) is not a statement.
    #[test]
    fn a_statement_has_one_text() {
        let id = GenerationId::of(b"g");
        let s = Statement::new(
            "web-1",
            Some(id),
            7,
            at(1_800_000_000),
            Duration::from_secs(60),
        );
        let text = s.text();
        assert_eq!(
            text,
            format!(
                "mesh-statement 1\nnode web-1\ngeneration {id}\nsequence 7\nexpires 2027-01-15T08:01:00Z\n"
            )
        );
        assert_eq!(Statement::parse(&text).unwrap(), s);
        let withdrawn = Statement::new("web-1", None, 8, at(0), Duration::ZERO);
        assert_eq!(Statement::parse(&withdrawn.text()).unwrap(), withdrawn);
        for bad in [
            text.replace("sequence 7", "sequence  7"),
            text.replace("sequence 7", "sequence 07"),
            text.replace("node web-1\n", "") + "node web-1\n",
            text.trim_end().to_owned(),
            text.clone() + "more\n",
            text.replace("web-1", "../x"),
            text.replace("2027-01-15T08:01:00Z", "2027-01-15T08:01:00.5Z"),
        ] {
            assert!(Statement::parse(&bad).is_err(), "{bad:?}");
        }
    }

    /// A node acts on a statement signed by a signer it trusts, for it, newer than the newest
    /// it accepted and not expired; the same statement again is no news; another node's, an
    /// older one, an expired one, or one signed by a stranger is refused, saying which.
    #[test]
    fn a_statement_is_for_one_node_newer_and_fresh() {
        let ci = key(b"ci");
        let trusted = signers(&ci);
        let id = GenerationId::of(b"g");
        let now = at(1_000_000);
        let day = Duration::from_secs(86400);
        let first = signed(&Statement::new("web-1", Some(id), 10, now, day), &ci);
        let judged = Statement::judge(&first, &trusted, Some("web-1"), None, now).unwrap();
        assert!(matches!(judged, Judged::New { .. }), "{judged:?}");
        let judged = Statement::judge(&first, &trusted, Some("web-1"), Some(&first), now).unwrap();
        assert!(matches!(judged, Judged::Again { .. }), "{judged:?}");
        // A node that knows no name yet takes the one stated.
        assert!(Statement::judge(&first, &trusted, None, None, now).is_ok());

        let other = Statement::judge(&first, &trusted, Some("web-2"), None, now).unwrap_err();
        assert!(matches!(other, StatementError::OtherNode { .. }), "{other}");
        let older = signed(&Statement::new("web-1", Some(id), 9, now, day), &ci);
        let stale = Statement::judge(&older, &trusted, Some("web-1"), Some(&first), now);
        assert!(
            matches!(
                stale,
                Err(StatementError::Stale {
                    sequence: 9,
                    highest: 10
                })
            ),
            "{stale:?}"
        );
        let expired = Statement::judge(&first, &trusted, Some("web-1"), None, now + day);
        assert!(
            matches!(expired, Err(StatementError::Expired { .. })),
            "{expired:?}"
        );
        // Expired, even when it is the one the node accepted.
        let again = Statement::judge(&first, &trusted, Some("web-1"), Some(&first), now + day);
        assert!(
            matches!(again, Err(StatementError::Expired { .. })),
            "{again:?}"
        );
        let stranger = signed(&Statement::new("web-1", Some(id), 11, now, day), &key(b"x"));
        let untrusted = Statement::judge(&stranger, &trusted, Some("web-1"), Some(&first), now);
        assert!(
            matches!(untrusted, Err(StatementError::Untrusted(_))),
            "{untrusted:?}"
        );
        // Signatures over the generation's id are not over a statement.
        let by_id = Signed {
            statement: first.statement.clone(),
            signatures: vec![crate::trust::sign(&ci, &id).unwrap()],
        };
        assert!(Statement::judge(&by_id, &trusted, Some("web-1"), None, now).is_err());
        // A newer statement naming an older generation: going back, allowed.
        let back = signed(
            &Statement::new("web-1", Some(GenerationId::of(b"old")), 12, now, day),
            &ci,
        );
        assert!(Statement::judge(&back, &trusted, Some("web-1"), Some(&first), now).is_ok());
    }

    /// The next sequence is the time in milliseconds, or one past the highest known.
    #[test]
    fn sequences_only_grow() {
        let now = at(1_000);
        assert_eq!(next_sequence(None, now), 1_000_000);
        assert_eq!(next_sequence(Some(5), now), 1_000_000);
        assert_eq!(next_sequence(Some(2_000_000), now), 2_000_001);
    }
}
