//! Trust: who vouches for a generation, and whom a node believes.
//!
//! A generation is signed by signing its id — the text `b3:…`, nothing around it — with an SSH
//! key, in the SSH signature format (`sshsig`) git and `ssh-keygen -Y` use, in the namespace
//! [`NAMESPACE`]. The signature is an object of its own beside the generation, never part of
//! it: the id stays the digest of the canonical encoding, reproducible anywhere. Any tool
//! checks one:
//!
//! ```text
//! printf %s b3:… | ssh-keygen -Y verify -f trusted-signers -I NAME -n mesh-generation -s SIG
//! ```
//!
//! A node's trusted signers are an allowed-signers file (`man ssh-keygen`, ALLOWED SIGNERS),
//! read as `ssh-keygen -Y verify` reads it (OpenSSH's sshsig.c), so the same file serves both
//! and both give the same verdict on the same signature at the same time:
//!
//! - a line is principals (comma-separated patterns, or quoted; the mesh accepts any
//!   principal and keeps the name for messages), then, unless the key follows at once, one
//!   field of comma-separated options, then the key and an optional comment; `#` starts a
//!   comment line, blank lines are skipped;
//! - option names match in any case, values are quoted (`\"` a quote inside, commas and blanks
//!   allowed): `namespaces="…"` (OpenSSH patterns: `*`, `?`, `!` negating; the line counts only
//!   if [`NAMESPACE`] matches), `valid-after="…"` and `valid-before="…"` (the line counts only
//!   inside them, both ends included, judged at the time the caller gives — the node's clock),
//!   `cert-authority` (the key vouches for certificates, which the mesh does not verify: such a
//!   line never makes its key a plain signer, and a refusal names it — as ssh-keygen refuses a
//!   plain key's signature on a CA line);
//! - a time is `YYYYMMDD[HHMM[SS]]`, in UTC with a `Z` or `UTC` suffix, else in the node's local
//!   time zone (`TZ`, else `/etc/localtime`, as ssh-keygen's `mktime` reads it);
//! - a line that does not read — an option ssh-keygen does not know, a value unquoted or not a
//!   time, an option twice, a `valid-before` not after its `valid-after`, a bad key — makes no
//!   key a signer (ssh-keygen skips it, saying why on its error output; the lines around it still
//!   count), and a refusal of a signature by its key names the line and why.
//!
//! A generation is accepted when one of its signatures is valid (over its id, in the namespace)
//! and made by a key on a line that counts at the time judged.

use std::fmt;

use ssh_key::{HashAlg, LineEnding, PublicKey, SshSig};

use crate::id::GenerationId;

/// The signatures' namespace.
pub const NAMESPACE: &str = "mesh-generation";

/// Where a node's trusted signers are, unless its record says otherwise.
pub const TRUSTED_SIGNERS: &str = "/etc/mesh/trusted-signers";

/// Why a signature or a signers file is not usable.
#[derive(Debug, thiserror::Error)]
pub enum TrustError {
    /// Not an SSH signature.
    #[error("not an SSH signature (sshsig): {0}")]
    NotASignature(String),
    /// A signature that does not hold: over something else, in another namespace, or damaged.
    #[error("its signature by {key} is not valid over {what} in namespace {NAMESPACE}: {why}")]
    Invalid {
        /// What it was to be over: `b3:…` (a generation), or a statement.
        what: String,
        /// The signing key's fingerprint.
        key: String,
        /// Why.
        why: String,
    },
    /// A line of the trusted signers that is not one.
    #[error("line {line} of the trusted signers: {why}")]
    Signers {
        /// Its number, from 1.
        line: usize,
        /// Why.
        why: String,
    },
    /// A key that cannot sign.
    #[error("{0}")]
    Key(String),
}

/// A signature of a generation.
#[derive(Debug, Clone)]
pub struct Signature {
    sig: SshSig,
    armored: String,
}

impl Signature {
    /// Reads an armored signature (`-----BEGIN SSH SIGNATURE-----`).
    pub fn parse(armored: &str) -> Result<Self, TrustError> {
        let sig = SshSig::from_pem(armored.trim().as_bytes())
            .map_err(|e| TrustError::NotASignature(e.to_string()))?;
        Ok(Self {
            sig,
            armored: armored.trim().to_owned() + "\n",
        })
    }

    /// Its armored text.
    pub fn armored(&self) -> &str {
        &self.armored
    }

    /// The key that made it.
    pub fn key(&self) -> PublicKey {
        PublicKey::from(self.sig.public_key().clone())
    }

    /// Its key's fingerprint (`SHA256:…`).
    pub fn fingerprint(&self) -> String {
        self.key().fingerprint(HashAlg::Sha256).to_string()
    }

    /// Checks that it is a signature of `id`, in the namespace, by the key it names.
    pub fn verify(&self, id: &GenerationId) -> Result<(), TrustError> {
        self.verify_message(&id.to_string(), id.to_string().as_bytes())
    }

    /// Checks that it is a signature of `message` (`what` names it in an error), in the
    /// namespace, by the key it names.
    pub fn verify_message(&self, what: &str, message: &[u8]) -> Result<(), TrustError> {
        self.key()
            .verify(NAMESPACE, message, &self.sig)
            .map_err(|e| TrustError::Invalid {
                what: what.to_owned(),
                key: self.fingerprint(),
                why: e.to_string(),
            })
    }
}

/// Signs `id` with an OpenSSH private key (not encrypted: a key with a passphrase signs through
/// the agent); the armored signature.
pub fn sign(key: &ssh_key::PrivateKey, id: &GenerationId) -> Result<String, TrustError> {
    sign_message(key, id.to_string().as_bytes())
}

/// Signs `message` with an OpenSSH private key, in the namespace: the armored signature.
pub fn sign_message(key: &ssh_key::PrivateKey, message: &[u8]) -> Result<String, TrustError> {
    if key.is_encrypted() {
        return Err(TrustError::Key(
            "the key is encrypted: load it into ssh-agent and sign through the agent".into(),
        ));
    }
    let sig = SshSig::sign(key, NAMESPACE, HashAlg::Sha512, message)
        .map_err(|e| TrustError::Key(format!("signing with it: {e}")))?;
    sig.to_pem(LineEnding::LF)
        .map_err(|e| TrustError::Key(format!("writing the signature: {e}")))
}

/// A line of the trusted signers that reads: a key, whom it names, and the options that bound
/// it. Whether it counts is judged at a time ([`Signer::counts_at`]), never when it is read.
#[derive(Debug, Clone)]
pub struct Signer {
    /// Its principals, as the file gives them (the mesh accepts any; the name is for messages).
    pub name: String,
    /// Its key.
    pub key: PublicKey,
    /// Its line in the file, from 1.
    pub line: usize,
    /// `namespaces="…"`: the patterns of the namespaces it signs in (`None`: any).
    pub namespaces: Option<String>,
    /// `valid-after="…"`, in seconds since the epoch: before it, the line does not count.
    pub valid_after: Option<u64>,
    /// `valid-before="…"`, in seconds since the epoch: after it, the line does not count.
    pub valid_before: Option<u64>,
    /// `cert-authority`: its key vouches for certificates only, and never signs as itself.
    pub cert_authority: bool,
}

impl fmt::Display for Signer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{} ({})",
            crate::text::escape(&self.name),
            self.key.fingerprint(HashAlg::Sha256)
        )
    }
}

impl Signer {
    /// Whether the line lets its key sign, in [`NAMESPACE`], at `now` (seconds since the epoch),
    /// or why not: in the order `ssh-keygen -Y verify` checks, and at the same bounds (a line is
    /// still valid at its `valid-before` second and already at its `valid-after` one).
    pub fn counts_at(&self, now: u64) -> Result<(), String> {
        let line = self.line;
        let name = crate::text::escape(&self.name);
        if self.cert_authority {
            return Err(format!(
                "line {line} is a cert-authority line: its key vouches for SSH certificates, \
                 which the mesh does not verify, and never signs as a plain key"
            ));
        }
        if let Some(patterns) = &self.namespaces {
            if match_pattern_list(NAMESPACE, patterns) != Match::Yes {
                return Err(format!(
                    "line {line} ({name}) is for namespaces \"{}\", not {NAMESPACE}",
                    crate::text::escape(patterns)
                ));
            }
        }
        if let Some(after) = self.valid_after.filter(|after| now < *after) {
            return Err(format!(
                "line {line} ({name}) is valid only from {} (valid-after); it is {} on this node",
                show_time(after),
                show_time(now)
            ));
        }
        if let Some(before) = self.valid_before.filter(|before| now > *before) {
            return Err(format!(
                "line {line} ({name}) has expired since {} (valid-before); it is {} on this node",
                show_time(before),
                show_time(now)
            ));
        }
        Ok(())
    }
}

/// A line that does not read: `ssh-keygen -Y verify` skips it (it says why on its error
/// output), so it makes no key a signer; a refusal of a signature by its key names it.
#[derive(Debug, Clone)]
pub struct Unread {
    /// Its number, from 1.
    pub line: usize,
    /// Its key, when that much of it reads.
    pub key: Option<PublicKey>,
    /// Why it does not read.
    pub why: String,
}

/// The signers a node trusts: its allowed-signers file as `ssh-keygen -Y verify` reads it.
#[derive(Debug, Clone, Default)]
pub struct TrustedSigners {
    /// Each line that reads, in the file's order — also those that count for no signature now
    /// (another namespace, outside their validity, a certificate authority).
    pub signers: Vec<Signer>,
    /// Each line that does not read.
    pub unread: Vec<Unread>,
}

/// Why a generation is not accepted: the signatures it has, and whom the node trusts.
#[derive(Debug, Clone)]
pub struct Refusal {
    /// What was signed: `generation b3:…`, or a statement.
    pub what: String,
    /// Each signature it has: its key's fingerprint, and why it does not count.
    pub has: Vec<String>,
    /// The signers the node trusts at the time it judged.
    pub trusts: Vec<String>,
}

impl fmt::Display for Refusal {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} is signed by no key this node trusts", self.what)?;
        if self.has.is_empty() {
            write!(f, "; it has no signature")?;
        } else {
            write!(f, "; its signatures: {}", self.has.join("; "))?;
        }
        if self.trusts.is_empty() {
            write!(f, "; this node trusts no signer now")
        } else {
            write!(f, "; this node trusts: {}", self.trusts.join(", "))
        }
    }
}

impl TrustedSigners {
    /// Reads the allowed-signers lines of a trusted signers file, as `ssh-keygen -Y verify`
    /// does: a line that does not read is kept aside ([`TrustedSigners::unread`]) and makes no
    /// key a signer, the others are read whole.
    pub fn parse(text: &str) -> Result<Self, TrustError> {
        let mut signers = Self::default();
        for (i, line) in text.lines().enumerate() {
            match read_line(i + 1, line) {
                None => {}
                Some(Ok(signer)) => signers.signers.push(signer),
                Some(Err(unread)) => signers.unread.push(unread),
            }
        }
        Ok(signers)
    }

    /// The signer of `id` among `signatures` this node trusts now, or why there is none.
    pub fn accept(&self, id: &GenerationId, signatures: &[Signature]) -> Result<&Signer, Refusal> {
        self.accept_message(
            &format!("generation {id}"),
            id.to_string().as_bytes(),
            signatures,
            std::time::SystemTime::now(),
        )
    }

    /// The signer of `message` (`what` names it) among `signatures` this node trusts at `now`
    /// (each line's `valid-after`/`valid-before` judged against it), or why there is none.
    pub fn accept_message(
        &self,
        what: &str,
        message: &[u8],
        signatures: &[Signature],
        now: std::time::SystemTime,
    ) -> Result<&Signer, Refusal> {
        let at = now
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_secs())
            .unwrap_or(0);
        let mut has = Vec::new();
        for sig in signatures {
            if let Err(e) = sig.verify_message(what, message) {
                has.push(format!("{} ({e})", sig.fingerprint()));
                continue;
            }
            let key = sig.key();
            let mut why = Vec::new();
            for signer in self
                .signers
                .iter()
                .filter(|s| s.key.key_data() == key.key_data())
            {
                match signer.counts_at(at) {
                    Ok(()) => return Ok(signer),
                    Err(not) => why.push(not),
                }
            }
            for unread in &self.unread {
                if unread
                    .key
                    .as_ref()
                    .is_some_and(|k| k.key_data() == key.key_data())
                {
                    why.push(format!(
                        "line {} does not read ({}), and ssh-keygen skips it too",
                        unread.line, unread.why
                    ));
                }
            }
            if why.is_empty() {
                has.push(format!("{}, a key it does not trust", sig.fingerprint()));
            } else {
                has.push(format!("{}: {}", sig.fingerprint(), why.join("; ")));
            }
        }
        Err(Refusal {
            what: what.to_owned(),
            has,
            trusts: self
                .signers
                .iter()
                .filter(|s| s.counts_at(at).is_ok())
                .map(Signer::to_string)
                .collect(),
        })
    }
}

/// What ssh-keygen takes for white space between a line's fields.
fn blank(c: char) -> bool {
    matches!(c, ' ' | '\t' | '\r' | '\n')
}

/// One line of the file (`n` its number): nothing for a blank line or a comment, else the
/// signer it names or why it does not read. The form is sshsig.c's: principals (one field,
/// or quoted), then, unless a key follows at once, one field of comma-separated options
/// (white space only inside quotes), then the key and an optional comment.
fn read_line(n: usize, line: &str) -> Option<Result<Signer, Unread>> {
    let unread = |key: Option<PublicKey>, why: String| Some(Err(Unread { line: n, key, why }));
    let rest = line.trim_start_matches(blank);
    if rest.is_empty() || rest.starts_with('#') {
        return None;
    }
    let (name, rest) = if let Some(quoted) = rest.strip_prefix('"') {
        match quoted.split_once('"') {
            Some(split) => split,
            None => return unread(None, "its name's quote does not close".into()),
        }
    } else {
        rest.split_at(rest.find(blank).unwrap_or(rest.len()))
    };
    let rest = rest.trim_start_matches(blank);
    if rest.is_empty() {
        return unread(None, "a name and no key".into());
    }
    // A key at once, as ssh-keygen tries first; else the options, then the key.
    let (options, key) = match read_key(rest) {
        Ok(key) => (Options::default(), key),
        Err(first) => {
            let Some(end) = options_end(rest) else {
                return unread(None, "a quote in its options does not close".into());
            };
            let (field, after) = rest.split_at(end);
            let after = after.trim_start_matches(blank);
            if after.is_empty() {
                return unread(None, format!("not a public key: {first}"));
            }
            let key = match read_key(after) {
                Ok(key) => key,
                Err(e)
                    if field.contains(['=', '"'])
                        || field.eq_ignore_ascii_case("cert-authority") =>
                {
                    return unread(None, format!("no public key after its options: {e}"))
                }
                Err(_) => return unread(None, format!("not a public key: {first}")),
            };
            match read_options(field) {
                Ok(options) => (options, key),
                Err(why) => return unread(Some(key), why),
            }
        }
    };
    Some(Ok(Signer {
        name: name.to_owned(),
        key,
        line: n,
        namespaces: options.namespaces,
        valid_after: options.valid_after,
        valid_before: options.valid_before,
        cert_authority: options.cert_authority,
    }))
}

/// The key at the start of `text`: its type and its base64 (a comment may follow).
fn read_key(text: &str) -> Result<PublicKey, String> {
    let mut words = text.split(blank).filter(|w| !w.is_empty());
    let (Some(kind), Some(body)) = (words.next(), words.next()) else {
        return Err("a key type and its key are two fields".into());
    };
    PublicKey::from_openssh(&format!("{kind} {body}")).map_err(|e| e.to_string())
}

/// Where the options field ends: at the first blank outside quotes (`\"` is a quote inside
/// them); `None` when a quote does not close.
fn options_end(text: &str) -> Option<usize> {
    let mut quoted = false;
    let mut chars = text.char_indices().peekable();
    while let Some((i, c)) = chars.next() {
        match c {
            '\\' if chars.peek().is_some_and(|(_, next)| *next == '"') => {
                chars.next();
            }
            '"' => quoted = !quoted,
            ' ' | '\t' if !quoted => return Some(i),
            _ => {}
        }
    }
    (!quoted).then_some(text.len())
}

/// A line's options, as read.
#[derive(Debug, Default)]
struct Options {
    cert_authority: bool,
    namespaces: Option<String>,
    valid_after: Option<u64>,
    valid_before: Option<u64>,
}

/// Reads the options field as sshsig.c's `sshsigopt_parse` does: names in any case, values
/// quoted, no option twice, and nothing else — an option ssh-keygen does not know makes the
/// line one that does not read, as it does for ssh-keygen.
fn read_options(field: &str) -> Result<Options, String> {
    let mut options = Options::default();
    let mut rest = field;
    while !rest.is_empty() {
        if let Some(after) = strip_prefix_any_case(rest, "cert-authority") {
            options.cert_authority = true;
            rest = after;
        } else if let Some(after) = strip_prefix_any_case(rest, "namespaces=") {
            let (value, after) = dequote(after, "namespaces")?;
            if options.namespaces.replace(value).is_some() {
                return Err("namespaces is given twice".into());
            }
            rest = after;
        } else if let Some((option, after)) =
            ["valid-after", "valid-before"].iter().find_map(|option| {
                strip_prefix_any_case(rest, &format!("{option}=")).map(|a| (*option, a))
            })
        {
            let (value, after) = dequote(after, option)?;
            let time = read_time(&value).map_err(|why| {
                format!(
                    "{option}=\"{}\" is not a time: {why}",
                    crate::text::escape(&value)
                )
            })?;
            let slot = if option == "valid-after" {
                &mut options.valid_after
            } else {
                &mut options.valid_before
            };
            if slot.replace(time).is_some() {
                return Err(format!("{option} is given twice"));
            }
            rest = after;
        } else {
            let option = rest.split(',').next().unwrap_or(rest);
            return Err(format!(
                "ssh-keygen knows no option {} (it knows cert-authority, namespaces, \
                 valid-after and valid-before)",
                crate::text::escape(option)
            ));
        }
        if rest.is_empty() {
            break;
        }
        match rest.strip_prefix(',') {
            Some("") => return Err("its options end in a comma".into()),
            Some(after) => rest = after,
            None => {
                return Err(format!(
                    "an unknown option at {}",
                    crate::text::escape(rest)
                ))
            }
        }
    }
    if let (Some(after), Some(before)) = (options.valid_after, options.valid_before) {
        if before <= after {
            return Err("its valid-before is not after its valid-after".into());
        }
    }
    Ok(options)
}

fn strip_prefix_any_case<'a>(text: &'a str, prefix: &str) -> Option<&'a str> {
    let head = text.get(..prefix.len())?;
    head.eq_ignore_ascii_case(prefix)
        .then(|| &text[prefix.len()..])
}

/// A quoted value at the start of `text` (`\"` a quote in it): the value and what follows.
fn dequote<'a>(text: &'a str, option: &str) -> Result<(String, &'a str), String> {
    let Some(inside) = text.strip_prefix('"') else {
        return Err(format!("{option}= takes a quoted value (\"…\")"));
    };
    let mut value = String::new();
    let mut chars = inside.char_indices();
    while let Some((i, c)) = chars.next() {
        match c {
            '"' => return Ok((value, &inside[i + 1..])),
            '\\' if inside[i + 1..].starts_with('"') => {
                chars.next();
                value.push('"');
            }
            _ => value.push(c),
        }
    }
    Err(format!("the quote of {option}= does not close"))
}

/// A time as ssh-keygen reads one (misc.c's `parse_absolute_time`): `YYYYMMDD`,
/// `YYYYMMDDHHMM` or `YYYYMMDDHHMMSS`, in UTC when followed by `Z` or `UTC` (any case), else
/// in the node's local time zone (`TZ`, else `/etc/localtime`, as the C library reads it); a
/// day past its month's end runs on into the next month, as `strptime` and `mktime` let it.
/// Seconds since the epoch; the epoch itself and before are refused, as ssh-keygen does.
fn read_time(text: &str) -> Result<u64, &'static str> {
    use chrono::{Duration, LocalResult, NaiveDate, TimeZone};
    let (digits, utc) = if let Some(d) = text.strip_suffix(['Z', 'z']).filter(|d| !d.is_empty()) {
        (d, true)
    } else if let Some(d) = text
        .len()
        .checked_sub(3)
        .and_then(|at| text.get(at..).filter(|t| t.eq_ignore_ascii_case("utc")))
        .and_then(|_| text.get(..text.len() - 3))
        .filter(|d| !d.is_empty())
    {
        (d, true)
    } else {
        (text, false)
    };
    let form = "not YYYYMMDD[HHMM[SS]][Z]";
    if !matches!(digits.len(), 8 | 12 | 14) || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return Err(form);
    }
    let field = |at: usize, len: usize| -> u32 {
        digits
            .get(at..at + len)
            .and_then(|f| f.parse().ok())
            .unwrap_or(0)
    };
    let (year, month, day) = (field(0, 4), field(4, 2), field(6, 2));
    let (hour, minute, second) = (field(8, 2), field(10, 2), field(12, 2));
    if !(1..=12).contains(&month)
        || !(1..=31).contains(&day)
        || hour > 23
        || minute > 59
        || second > 60
    {
        return Err("a month, day, hour, minute or second out of range");
    }
    let naive = NaiveDate::from_ymd_opt(year as i32, month, 1)
        .and_then(|first| first.checked_add_days(chrono::Days::new(u64::from(day - 1))))
        .and_then(|date| date.and_hms_opt(hour, minute, 0))
        .ok_or(form)?
        + Duration::seconds(i64::from(second));
    let seconds = if utc {
        naive.and_utc().timestamp()
    } else {
        match chrono::Local.from_local_datetime(&naive) {
            LocalResult::Single(t) | LocalResult::Ambiguous(t, _) => t.timestamp(),
            // A local time a clock change skipped: the one an hour on, as `mktime` gives.
            LocalResult::None => (naive.and_utc() + Duration::hours(1)).timestamp(),
        }
    };
    u64::try_from(seconds)
        .ok()
        .filter(|s| *s > 0)
        .ok_or("not after 1970-01-01 00:00:00 UTC")
}

/// A time (seconds since the epoch) for a message, in UTC.
fn show_time(seconds: u64) -> String {
    i64::try_from(seconds)
        .ok()
        .and_then(|s| chrono::DateTime::from_timestamp(s, 0))
        .map(|t| t.format("%Y-%m-%d %H:%M:%S UTC").to_string())
        .unwrap_or_else(|| format!("{seconds} s after the epoch"))
}

/// Whether a name matches a pattern list (OpenSSH's `match_pattern_list`, case kept).
#[derive(Debug, PartialEq, Eq)]
enum Match {
    /// A pattern matches it, no negated one does.
    Yes,
    /// No pattern matches it.
    No,
    /// A negated pattern (`!…`) matches it.
    Negated,
}

/// `name` against comma-separated patterns (`*` any run, `?` any one character, `!` before a
/// pattern negates it, and a negated match wins).
fn match_pattern_list(name: &str, patterns: &str) -> Match {
    let mut found = Match::No;
    for pattern in patterns.split(',') {
        let (negated, pattern) = match pattern.strip_prefix('!') {
            Some(p) => (true, p),
            None => (false, pattern),
        };
        if match_pattern(name.as_bytes(), pattern.as_bytes()) {
            if negated {
                return Match::Negated;
            }
            found = Match::Yes;
        }
    }
    found
}

fn match_pattern(name: &[u8], pattern: &[u8]) -> bool {
    match pattern.split_first() {
        None => name.is_empty(),
        Some((b'*', rest)) => (0..=name.len()).any(|skip| match_pattern(&name[skip..], rest)),
        Some((b'?', rest)) => !name.is_empty() && match_pattern(&name[1..], rest),
        Some((c, rest)) => name.first() == Some(c) && match_pattern(&name[1..], rest),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key() -> ssh_key::PrivateKey {
        let seed = blake3::hash(b"a test key");
        ssh_key::PrivateKey::from(ssh_key::private::Ed25519Keypair::from_seed(seed.as_bytes()))
    }

    fn other() -> ssh_key::PrivateKey {
        let seed = blake3::hash(b"another key");
        ssh_key::PrivateKey::from(ssh_key::private::Ed25519Keypair::from_seed(seed.as_bytes()))
    }

    fn signers(key: &ssh_key::PrivateKey) -> TrustedSigners {
        let line = format!(
            "# the fleet's CI\nci {}\n",
            key.public_key().to_openssh().unwrap()
        );
        TrustedSigners::parse(&line).unwrap()
    }

    /// 2026-01-01 00:00:00 UTC.
    const NOW: u64 = 1_767_225_600;

    fn at(seconds: u64) -> std::time::SystemTime {
        std::time::UNIX_EPOCH + std::time::Duration::from_secs(seconds)
    }

    /// The verdict on a signature of `message` by `key()` under the file `text`, at `now`.
    fn judged(text: &str, now: u64) -> Result<String, String> {
        let signature = Signature::parse(&sign_message(&key(), b"message").unwrap()).unwrap();
        TrustedSigners::parse(text)
            .unwrap()
            .accept_message("a message", b"message", &[signature], at(now))
            .map(|s| s.name.clone())
            .map_err(|r| r.to_string())
    }

    fn k() -> String {
        key().public_key().to_openssh().unwrap()
    }

    /// A signature of the id by a trusted key is accepted; by another key, over another id,
    /// cut short, or with no signature at all, refused, naming what it has and whom the node
    /// trusts.
    #[test]
    fn accepted_only_signed_by_a_trusted_key_over_its_id() {
        let id = GenerationId::of(b"a generation");
        let trusted = signers(&key());
        let good = Signature::parse(&sign(&key(), &id).unwrap()).unwrap();
        assert_eq!(
            trusted
                .accept(&id, std::slice::from_ref(&good))
                .unwrap()
                .name,
            "ci"
        );

        let stranger = Signature::parse(&sign(&other(), &id).unwrap()).unwrap();
        let refused = trusted.accept(&id, &[stranger]).unwrap_err().to_string();
        assert!(
            refused.contains("a key it does not trust") && refused.contains("ci (SHA256:"),
            "{refused}"
        );

        let elsewhere = GenerationId::of(b"another generation");
        let refused = trusted
            .accept(&elsewhere, std::slice::from_ref(&good))
            .unwrap_err()
            .to_string();
        assert!(refused.contains("not valid over"), "{refused}");

        assert!(trusted
            .accept(&id, &[])
            .unwrap_err()
            .to_string()
            .contains("no signature"));
        let armored = good.armored();
        assert!(
            Signature::parse(&armored[..armored.len() / 2]).is_err(),
            "cut short"
        );
    }

    /// The file is ssh-keygen's allowed-signers form: comments, blank lines, a comment after
    /// the key, options between name and key; a line whose namespaces leave out the mesh's
    /// counts for no signature, one that names it (or a pattern of it) does.
    #[test]
    fn signers_in_the_allowed_signers_form() {
        let k = k();
        let text = format!(
            "# comment\n\n  \t# indented comment\nops {k} laptop\nother namespaces=\"git\" {k}\n\
             all namespaces=\"git,mesh-generation\" {k}\nstar namespaces=\"mesh-*\" {k}\n"
        );
        let signers = TrustedSigners::parse(&text).unwrap();
        let lines: Vec<(usize, &str)> = signers
            .signers
            .iter()
            .map(|s| (s.line, s.name.as_str()))
            .collect();
        assert_eq!(lines, [(4, "ops"), (5, "other"), (6, "all"), (7, "star")]);
        let counting: Vec<&str> = signers
            .signers
            .iter()
            .filter(|s| s.counts_at(NOW).is_ok())
            .map(|s| s.name.as_str())
            .collect();
        assert_eq!(counting, ["ops", "all", "star"]);
        assert!(signers.unread.is_empty(), "{:?}", signers.unread);
    }

    /// Option names match in any case, values are quoted and may hold commas and blanks, and
    /// `\"` is a quote inside one.
    #[test]
    fn options_in_any_case_with_quoted_values() {
        let k = k();
        let line = format!(
            "ci,ops NAMESPACES=\"git, x,mesh-generation\",Valid-After=\"20250101\",VALID-BEFORE=\"20270101Z\" {k}\n"
        );
        let signers = TrustedSigners::parse(&line).unwrap();
        let s = &signers.signers[0];
        assert_eq!(s.name, "ci,ops");
        assert_eq!(s.namespaces.as_deref(), Some("git, x,mesh-generation"));
        assert_eq!(s.valid_before, Some(1_798_761_600));
        assert!(s.valid_after.is_some());
        assert_eq!(judged(&line, NOW), Ok("ci,ops".into()));
        let quoted = format!("ci namespaces=\"a\\\"b,mesh-generation\" {k}\n");
        let signers = TrustedSigners::parse(&quoted).unwrap();
        assert_eq!(
            signers.signers[0].namespaces.as_deref(),
            Some("a\"b,mesh-generation")
        );
    }

    /// `valid-before` and `valid-after` bound the line at the time judged, both ends included,
    /// and a refusal says since when it expired, or from when it is valid.
    #[test]
    fn a_line_counts_only_inside_its_validity() {
        let k = k();
        let expired = format!("ci valid-before=\"20251231235959Z\" {k}\n");
        let refused = judged(&expired, NOW).unwrap_err();
        assert!(
            refused.contains("line 1 (ci) has expired since 2025-12-31 23:59:59 UTC")
                && refused.contains("it is 2026-01-01 00:00:00 UTC on this node")
                && refused.contains("this node trusts no signer now"),
            "{refused}"
        );
        assert!(
            judged(&expired, NOW - 1).is_ok(),
            "valid at its last second"
        );

        let early = format!("ci valid-after=\"202601010001Z\" {k}\n");
        let refused = judged(&early, NOW).unwrap_err();
        assert!(
            refused.contains("line 1 (ci) is valid only from 2026-01-01 00:01:00 UTC"),
            "{refused}"
        );
        assert!(
            judged(&early, NOW + 60).is_ok(),
            "valid from its first second"
        );

        // Another line for the same key that counts now lets it through.
        let both = format!("{expired}ci {k}\n");
        assert!(judged(&both, NOW).is_ok());
    }

    /// A key on a cert-authority line is never a plain signer: a signature by it is refused,
    /// naming the line; the same key on a plain line of its own counts.
    #[test]
    fn a_cert_authority_line_never_makes_a_plain_signer() {
        let k = k();
        let ca = format!("ci cert-authority {k}\n");
        let refused = judged(&ca, NOW).unwrap_err();
        assert!(
            refused.contains("line 1 is a cert-authority line:"),
            "{refused}"
        );
        let ca = format!("ci Cert-Authority,namespaces=\"mesh-generation\" {k}\n");
        assert!(judged(&ca, NOW).is_err());
        assert!(judged(&format!("{ca}ci {k}\n"), NOW).is_ok());
    }

    /// A line that does not read — an option ssh-keygen does not know, a value not quoted or
    /// not a time, an option twice, a window that ends before it starts, a bad key — makes no
    /// signer, as ssh-keygen skips it; the lines around it still count, and a refusal of a
    /// signature by its key names it.
    #[test]
    fn a_line_that_does_not_read_counts_for_nothing() {
        let k = k();
        for (options, why) in [
            ("from=\"10.0.0.1\"", "knows no option from="),
            ("valid-after=20250101", "takes a quoted value"),
            ("valid-after=\"2025010\"", "is not a time"),
            ("valid-before=\"20251301\"", "out of range"),
            ("valid-before=\"19700101000000Z\"", "not after 1970"),
            ("namespaces=\"a\",namespaces=\"b\"", "given twice"),
            (
                "valid-after=\"20260101\",valid-before=\"20250101\"",
                "not after its valid-after",
            ),
            ("namespaces=\"mesh-generation\",", "end in a comma"),
            ("cert-authorityx", "unknown option"),
        ] {
            let text = format!("ci {options} {k}\n");
            let signers = TrustedSigners::parse(&text).unwrap();
            assert!(signers.signers.is_empty(), "{options}");
            assert!(
                signers.unread[0].why.contains(why),
                "{options}: {:?}",
                signers.unread
            );
            let refused = judged(&text, NOW).unwrap_err();
            assert!(
                refused.contains("line 1 does not read") && refused.contains(why),
                "{options}: {refused}"
            );
            assert!(judged(&format!("{text}ci {k}\n"), NOW).is_ok(), "{options}");
        }
        let bad = TrustedSigners::parse("ops ssh-ed25519 notbase64\nalone\n").unwrap();
        assert_eq!(bad.unread.len(), 2, "{:?}", bad.unread);
        assert!(
            bad.unread[0].why.contains("not a public key"),
            "{:?}",
            bad.unread
        );
    }

    /// Times are read as ssh-keygen reads them: three lengths, `Z` or `UTC` in any case for
    /// UTC, a day past the month's end running into the next month.
    #[test]
    fn times_as_ssh_keygen_reads_them() {
        assert_eq!(read_time("20260101Z"), Ok(NOW));
        assert_eq!(read_time("202601010000utc"), Ok(NOW));
        assert_eq!(read_time("20260101000000z"), Ok(NOW));
        assert_eq!(read_time("20251231235960Z"), Ok(NOW));
        assert_eq!(read_time("20250229Z"), read_time("20250301Z"));
        assert!(read_time("2026010Z").is_err());
        assert!(read_time("2026-01-01").is_err());
        assert!(read_time("20260101240000Z").is_err());
        assert!(read_time("Z").is_err());
    }

    /// Namespace patterns are OpenSSH's: `*` and `?`, a list, and a negated pattern that wins.
    #[test]
    fn namespace_patterns_as_openssh_matches_them() {
        for (patterns, expected) in [
            ("mesh-generation", Match::Yes),
            ("git,mesh-*", Match::Yes),
            ("*", Match::Yes),
            ("mesh-generatio?", Match::Yes),
            ("Mesh-Generation", Match::No),
            ("git", Match::No),
            ("*,!mesh-generation", Match::Negated),
            ("!mesh-*,mesh-generation", Match::Negated),
        ] {
            assert_eq!(
                match_pattern_list(NAMESPACE, patterns),
                expected,
                "{patterns}"
            );
        }
    }
}
